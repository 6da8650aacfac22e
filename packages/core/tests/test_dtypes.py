"""Dtype names in the schema and in printed text."""

import pytest
import torch
from ember_core import dtype_name, to_dtype
from ember_core.graph._dtypes import DTYPE_NAMES, short_dtype


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_every_dtype_name_round_trips(name):
    assert dtype_name(to_dtype(name)) == name


def test_short_names_are_used_in_text():
    assert [short_dtype(n) for n in ("float32", "bfloat16", "int64", "bool")] == ["f32", "bf16", "i64", "b8"]


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown dtype 'float17'; known: float64, float32"):
        to_dtype("float17")


def test_dtype_outside_the_schema_is_named():
    with pytest.raises(ValueError, match="dtype torch.quint8 has no name in the ember schema"):
        dtype_name(torch.quint8)
