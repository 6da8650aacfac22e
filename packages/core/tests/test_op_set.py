"""The decomposition table: core ATen minus random ops."""

from __future__ import annotations

import pytest
import torch
from ember_core import decompositions, has_effect, is_random

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


@pytest.mark.parametrize("fn", [
    lambda xs, ys: torch._foreach_add(xs, ys, alpha=2.0),
    lambda xs, ys: torch._foreach_addcmul(xs, ys, ys, value=0.5),
    lambda xs, ys: torch._foreach_addcdiv(xs, ys, [y.abs() + 1 for y in ys], 0.25),
    lambda xs, ys: torch._foreach_lerp(xs, ys, 0.3),
    lambda xs, ys: torch._foreach_pow(2.0, xs),
    lambda xs, ys: torch._foreach_mul(xs, [0.5, 2.0]),
    lambda xs, ys: torch._foreach_sqrt([x.abs() for x in xs]),
    lambda xs, ys: torch._foreach_maximum(xs, ys),
], ids=["add_alpha", "addcmul_value", "addcdiv", "lerp", "pow_scalar_base", "mul_scalar_list", "sqrt", "maximum"])
def test_foreach_ops_decompose_into_per_tensor_ops(fn):
    from torch.fx.experimental.proxy_tensor import make_fx

    xs, ys = [torch.randn(3), torch.randn(2, 4)], [torch.randn(3), torch.randn(2, 4)]
    gm = make_fx(lambda a, b, c, d: fn([a, b], [c, d]), decomposition_table=decompositions())(*xs, *ys)
    assert not [n for n in gm.graph.nodes if "_foreach_" in str(n.target)], gm.code
    for got, want in zip(gm(*xs, *ys), fn(xs, ys)):
        torch.testing.assert_close(got, want)


def test_ops_torch_registers_as_effectful_are_named():
    assert has_effect("aten._linalg_check_errors.default") and has_effect(torch.ops.aten._print.default)
    assert not has_effect("aten.mul.Tensor") and not has_effect("operator.mul")


def test_ops_with_numerically_worse_decompositions_stay_whole():
    from ember_core._op_set import NUMERICALLY_KEPT

    assert "aten.special_log_ndtr.default" in NUMERICALLY_KEPT
    assert aten.special_log_ndtr.default not in decompositions()
