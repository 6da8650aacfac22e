"""Pointwise lowerings against the reference interpreter: every op, broadcast, scalars, dtypes, layouts."""

import pytest
import torch
import torch.nn.functional as F
from lowering_checks import check, trace

torch.manual_seed(0)
X = torch.randn(6, 7)

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "reciprocal": torch.reciprocal, "sign": torch.sign, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "frac": torch.frac, "exp": torch.exp,
    "exp2": torch.exp2, "expm1": torch.expm1, "log": lambda x: torch.log(x.abs() + 0.1), "log2": torch.log2,
    "log10": torch.log10, "log1p": lambda x: torch.log1p(x.abs()), "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5), "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": lambda x: torch.asin(x.clamp(-1, 1)), "acos": lambda x: torch.acos(x.clamp(-1, 1)),
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh,
    "acosh": lambda x: torch.acosh(x.abs() + 1), "atanh": lambda x: torch.atanh(x.clamp(-0.9, 0.9)),
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": lambda x: torch.erfinv(x.clamp(-0.9, 0.9)),
    "lgamma": lambda x: torch.lgamma(x.abs() + 0.5), "sigmoid": torch.sigmoid, "square": torch.square,
    "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite, "signbit": torch.signbit,
    "isposinf": torch.isposinf, "isneginf": torch.isneginf, "nan_to_num": torch.nan_to_num,
    "logical_not": torch.logical_not,
}
ACTIVATIONS = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "mish": F.mish, "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "elu": lambda x: F.elu(x, 1.5),
    "selu": F.selu, "celu": F.celu, "softplus": lambda x: F.softplus(x, beta=2, threshold=3),
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5), "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "relu6": F.relu6, "logsigmoid": F.logsigmoid, "softsign": F.softsign, "tanhshrink": F.tanhshrink,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_op_matches_eager(name):
    check(UNARY[name], X)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_eager(name):
    check(ACTIVATIONS[name], X)


def test_nan_and_inf_propagate_through_math():
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5]])
    check(lambda x: (x.exp(), torch.maximum(x, x * 0), x.clamp(-1, 1), torch.nan_to_num(x), x.sign(), F.relu(x)), x)


def test_binary_ops_with_broadcast_and_scalars():
    v = torch.randn(7)
    check(lambda x, v: (x + v, x - 2 * v, x * v.view(1, 7), x / v, torch.add(x, v, alpha=3), torch.rsub(x, 2.0),
                        x ** 2, x.abs() ** v, 2 ** x, torch.maximum(x, v), torch.minimum(x, v), torch.atan2(x, v),
                        torch.copysign(x, v), torch.fmax(x, v), torch.fmin(x, v), torch.remainder(x, 1.5),
                        torch.fmod(x, 1.5), x // 0.7, torch.div(x, v, rounding_mode="trunc"),
                        torch.div(x, v, rounding_mode="floor")), X, v)


def test_comparisons_promote_their_inputs():
    i = torch.randint(-3, 3, (6, 7))
    check(lambda x, i: (x > i, x == 0.5, i <= 1.5, x != i, i >= x, torch.lt(x, x.t().t()), i.eq(2)), X, i)


def test_integer_arithmetic_stays_integer():
    i = torch.randint(-9, 9, (6, 7))
    check(lambda i: (i + 1, i * 3, i // 4, i % 4, torch.fmod(i, 4), i.abs(), -i, i & 3, i | 8, i ^ 5, ~i,
                     i << 1, i >> 1, i.sign(), torch.div(i, 4, rounding_mode="trunc"), i / 4, i.float().exp()), i)


def test_logical_ops_on_any_dtype():
    i = torch.randint(0, 3, (6, 7))
    check(lambda x, i: (torch.logical_and(x > 0, i), torch.logical_or(x, i), torch.logical_xor(x > 0, x < 1),
                        (x > 0) & (i > 0), (x > 0) | (i > 1), ~(x > 0)), X, i)


def test_where_clamp_masked_fill_lerp_addcmul():
    y, lo, hi = torch.randn(6, 7), torch.full((7,), -0.3), torch.full((6, 1), 0.4)
    check(lambda x, y, lo, hi: (torch.where(x > 0, x, y), torch.where(x > 0, 1.0, y), torch.where(x > 0, x, 2),
                                x.clamp(-0.5, 0.5), x.clamp(min=0.1), x.clamp(max=0.1), torch.clamp(x, lo, hi),
                                x.masked_fill(x > 0, -1.0), torch.lerp(x, y, 0.3), torch.lerp(x, y, torch.sigmoid(y)),
                                torch.addcmul(x, y, y, value=0.5), torch.addcdiv(x, y, y.abs() + 1, value=2)),
          X, y, lo, hi)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
                                   torch.bool, torch.uint8, torch.int8])
def test_casts_between_dtypes(dtype):
    check(lambda x: (x.to(dtype), (x * 100).to(dtype).to(torch.float32), x.to(dtype) == 0), X)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_compute_in_float32(dtype):
    plan = check(lambda x: (x * 2 + 1).exp() - x, X.to(dtype))
    computed = {i.dtype for k in plan.kernels for i in k.instrs() if i.op.value in ("exp", "add", "mul", "sub")}
    assert computed == {"float32"}


def test_non_contiguous_and_offset_inputs():
    base = torch.randn(10, 8)
    check(lambda a, b, c: (a.sin() + 1, a * b, b.exp(), c * 2), base[:8].t(), base[2:], base[1:, ::2])


def test_broadcast_of_size_one_and_rank_zero_inputs():
    check(lambda x, r, c, s: (x + r, x * c, x - s, s * 2), X, torch.randn(1, 7), torch.randn(6, 1), torch.tensor(1.5))


def test_zero_size_tensors():
    check(lambda x, y: (x + 1, x.exp() * y, (x > 0).float()), torch.randn(0, 7), torch.randn(7))


def test_symbolic_sizes_serve_every_size():
    plan = check(lambda x, v: (x * v + 1).tanh(), torch.randn(6, 7), torch.randn(7), mode="symbolic",
                 others=[(torch.randn(3, 11), torch.randn(11)), (torch.randn(0, 5), torch.randn(5))])
    assert plan.symbols and all(not d.size.is_number for d in plan.kernels[0].dims)


def test_copy_and_clone_produce_fresh_buffers():
    plan = check(lambda x: (x.clone(), torch.ops.aten.copy.default(torch.empty(6, 7), x.t().t())), X)
    assert all(b.kind != "view" for b in plan.buffers)


def test_xlogy_takes_eagers_cases_in_eagers_order():
    """Kept whole by ember-core (its decomposition's gradient is NaN at 0, 0): NaN y wins over x = 0, which wins
    over log(0) and log(inf); integers promote to the default float."""
    x = torch.tensor([[0.0, 0.0, 0.0, 2.0, 1.0, float("nan"), -1.0, 3.0]])
    y = torch.tensor([[0.0, float("nan"), float("inf"), 0.0, -1.0, 2.0, 2.0, float("inf")]])
    i = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    check(lambda x, y, i: (torch.xlogy(x, y), torch.xlogy(i, y), torch.xlogy(i, i + 1)), x, y, i)
    check(lambda x, y: (torch.xlogy(x, 2.0), torch.xlogy(0.0, y), torch.xlogy(3, y)), x, y)


def test_xlog1py_takes_xlogys_cases():
    """Kept whole like xlogy (its decomposition's gradient for x at x = 0 is 0), every overload."""
    x = torch.tensor([[0.0, 0.0, 0.0, 2.0, 1.0, float("nan"), -1.0, 3.0, 0.0]])
    y = torch.tensor([[-1.0, float("nan"), float("inf"), -1.0, -2.0, 2.0, 2.0, float("inf"), -3.0]])
    check(lambda x, y: (torch.special.xlog1py(x, y), torch.special.xlog1py(x, 0.5), torch.special.xlog1py(0.0, y),
                        torch.special.xlog1py(x.int(), y)), x, y)


def test_ops_kept_whole_for_their_gradients_match_eager_at_special_values():
    """celu, mish, softplus, sinc, logit, entr and softshrink reach lowering whole (ember-core keeps them for
    eager's derivatives); their rules must give eager's values at the edges too."""
    x = torch.tensor([[-float("inf"), -20.0, -1.0, -0.0, 0.0, 1e-30, 0.25, 0.5, 1.0, 20.0, 100.0, float("inf"),
                       float("nan")]])
    check(lambda x: (F.celu(x, 1.5), F.mish(x), F.softplus(x, beta=3, threshold=0.2), torch.sinc(x),
                     torch.logit(x), torch.logit(x, eps=0.1), torch.special.entr(x), F.softshrink(x),
                     F.softshrink(x, 1.0)), x)
    assert "aten.softshrink.default" in {n.op for n in trace(F.softshrink, x).nodes}
