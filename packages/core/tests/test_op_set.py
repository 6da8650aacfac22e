"""The decomposition table: core ATen minus random ops."""

from __future__ import annotations

import torch
from ember_core import decompositions, is_random

aten = torch.ops.aten


def test_random_ops_are_never_decomposed():
    table = decompositions()
    assert aten.bernoulli.default not in table
    assert not any(is_random(op) for op in table)


def test_core_decompositions_are_kept():
    table = decompositions()
    assert aten.silu.default in table and aten.native_dropout_backward.default in table


def test_is_random():
    assert is_random(aten.native_dropout.default) and is_random(aten.bernoulli.p)
    assert not is_random(aten.mul.Tensor) and not is_random(print)


def test_is_random_takes_schema_names():
    assert is_random("aten.native_dropout.default") and not is_random("aten.add.Tensor")
    assert not is_random("aten.no_such_op.default")
