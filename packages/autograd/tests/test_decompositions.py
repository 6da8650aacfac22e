"""The decomposition table: core ATen minus random ops."""

from __future__ import annotations

import torch
from ember_autograd import decompositions, is_random

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
