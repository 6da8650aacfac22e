"""The decomposition table: core ATen minus random ops."""

from __future__ import annotations

import pytest
import torch
from ember_core import decompositions, has_effect, is_random
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def test_random_ops_are_never_decomposed():
    table = decompositions()
    assert aten.bernoulli.default not in table
    assert not any(is_random(op) for op in table)


def test_core_decompositions_are_kept():
    table = decompositions()
    assert aten.silu.default in table and aten.native_dropout_backward.default in table


def test_negated_and_conjugated_views_become_their_values():
    """A kernel reading a `_neg_view`'s storage would drop the sign ATen applies as it reads."""
    table = decompositions()
    x, z = torch.randn(4), torch.randn(4, dtype=torch.complex64)
    out = table[aten._neg_view.default](x)
    assert not out.is_neg() and torch.equal(out, -x)
    out = table[aten._conj.default](z)
    assert not out.is_conj() and torch.equal(out, z.conj().resolve_conj())


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


def test_ops_with_a_side_effect_are_named_on_every_torch():
    """`_linalg_check_errors` by ember's own list (torch 2.11's registry lacks it), `_print` by torch's."""
    assert has_effect("aten._linalg_check_errors.default") and has_effect(torch.ops.aten._print.default)
    assert not has_effect("aten.mul.Tensor") and not has_effect("operator.mul")


def test_dead_code_elimination_with_is_impure_node_keeps_the_factorization_check():
    """linalg.cholesky decomposes to `linalg_cholesky_ex` and a check nothing reads; on torch 2.11 fx's own
    predicate dropped the check, so a compiled cholesky of a matrix that is not positive-definite returned numbers."""
    from ember_core import is_impure_node

    gm = make_fx(lambda x: torch.linalg.cholesky(x) * 2, decomposition_table=decompositions())(torch.eye(3))
    assert any(n.target is torch.ops.aten._linalg_check_errors.default for n in gm.graph.nodes), gm.code
    gm.graph.eliminate_dead_code(is_impure_node)
    assert any(n.target is torch.ops.aten._linalg_check_errors.default for n in gm.graph.nodes), gm.code


def test_ops_with_numerically_worse_decompositions_stay_whole():
    from ember_core.graph._op_set import NUMERICALLY_KEPT

    assert "aten.special_log_ndtr.default" in NUMERICALLY_KEPT
    assert aten.special_log_ndtr.default not in decompositions()


def test_detach_stays_detach():
    """Decomposed to `aten.alias` it would no longer stop the gradient (capture reads it as a plain view)."""
    from ember_core.graph._op_set import MEANING_KEPT

    assert "aten.detach.default" in MEANING_KEPT
    assert aten.detach.default not in decompositions()


@pytest.mark.parametrize("ord", [2, 0.5, 0], ids=["p2", "p0.5", "p0"])
def test_vector_norm_keeps_eager_gradient_at_zero(ord):
    """torch 2.14 decomposes linalg_vector_norm into pow(sum(|x|^p), 1/p) (sum(x != 0) for p = 0): its gradient is
    NaN at a zero vector (at any zero element for p < 1), and the p = 0 norm no longer requires grad. Traced with
    the table, the graph must give eager's subgradient 0 and keep requires_grad."""
    from torch.fx.experimental.proxy_tensor import make_fx

    fn = lambda x: torch.linalg.vector_norm(x, ord)  # noqa: E731
    x = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0])
    gm = make_fx(fn, decomposition_table=decompositions())(x)
    for value in (x, torch.tensor([0.0, 1.5, -2.0, 0.0, 0.5])):
        eager_x, traced_x = value.clone().requires_grad_(), value.clone().requires_grad_()
        want, got = fn(eager_x), gm(traced_x)
        assert got.requires_grad == want.requires_grad
        (want_grad,) = torch.autograd.grad(want, eager_x, allow_unused=True)
        (got_grad,) = torch.autograd.grad(got, traced_x, allow_unused=True)
        zero = torch.zeros_like(value)
        torch.testing.assert_close(zero if got_grad is None else got_grad, zero if want_grad is None else want_grad)


def test_softshrink_backward_as_its_formula_for_symbolic_traces_is_atens_kernel_but_at_nan():
    """Joint traces of symbolic sizes decompose softshrink's backward (ATen's TensorIterator kernel, which fake
    tensors of symbolic sizes cannot run); the formula gives ATen's gradient at ±lambd and the infinities. At NaN it
    passes the gradient, as ATen's scalar loop does (its vector lanes give 0: eager itself differs by position)."""
    from ember_core import symbolic_backward_formulas

    formula = symbolic_backward_formulas()[torch.ops.aten.softshrink_backward.default]
    assert torch.ops.aten.softshrink_backward.default not in decompositions()  # static traces keep ATen's kernel
    x = torch.tensor([-0.5, 0.5, -0.50001, 0.50001, 0.0, float("inf"), -float("inf"), 2.0, -1.0, 0.25])
    g = torch.arange(1.0, 11.0)
    for dtype in (torch.float32, torch.bfloat16):
        expected = torch.ops.aten.softshrink_backward.default(g.to(dtype), x.to(dtype), 0.5)
        got = formula(g.to(dtype), x.to(dtype), 0.5)
        assert got.dtype == dtype
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    nan = formula(g[:3], torch.tensor([float("nan"), 0.0, 1.0]), 0.5)
    torch.testing.assert_close(nan, torch.tensor([1.0, 0.0, 3.0]), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["native_layer_norm_backward", "native_batch_norm_backward",
                                  "native_group_norm_backward"])
def test_a_capture_keeps_a_norms_backward_whole_where_it_may_be_differentiated(name):
    """Under grad mode a captured norm backward may be differentiated again, and its double backward counts the
    saved mean and inverse std as functions of the input: it stays whole there, and decomposes everywhere else."""
    from ember_core import STATISTICS_BACKWARDS, capture_decompositions

    op = getattr(aten, name).default
    assert f"aten.{name}.default" in STATISTICS_BACKWARDS
    x, w, b = torch.randn(4, 6), torch.ones(6), torch.zeros(6)
    if name == "native_layer_norm_backward":
        _, mean, rstd = aten.native_layer_norm(x, [6], w, b, 1e-5)
        args = (torch.randn(4, 6), x, [6], mean, rstd, w, b, [True, True, True])
    elif name == "native_batch_norm_backward":
        _, mean, rstd = aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
        args = (torch.randn(4, 6), x, w, None, None, mean, rstd, True, 1e-5, [True, True, True])
    else:
        _, mean, rstd = aten.native_group_norm(x, w, b, 4, 6, 1, 2, 1e-5)
        args = (torch.randn(4, 6), x, mean, rstd, w, 4, 6, 1, 2, [True, True, True])

    def ops(grad_mode, table):
        with torch.set_grad_enabled(grad_mode):
            gm = make_fx(lambda *a: op(*a), decomposition_table=table)(*args)
        return {n.target for n in gm.graph.nodes if n.op == "call_function"}

    assert op in ops(True, capture_decompositions())
    assert op not in ops(False, capture_decompositions())
    assert op not in ops(True, decompositions())  # the joint trace's table: decomposed beneath autograd's formula
