"""Classes of single ops that once failed to compile or differed from eager: effectful ops (linalg error checks),
functional `aten.copy` under autograd, and ops whose decomposition had NaN gradients where eager's are finite.
Each compares the forward and the gradient of `out.sum()` with eager, through both frontends."""

from __future__ import annotations

import ember
import pytest
import torch
import torch.nn.functional as F


def compile_with(frontend, fn):
    return ember.compile(fn, options={"frontend": frontend})


def assert_same_as_eager(frontend, fn, x):
    eager_x = x.detach().clone().requires_grad_(True)
    ember_x = x.detach().clone().requires_grad_(True)
    eager = fn(eager_x)
    eager.sum().backward()
    out = compile_with(frontend, fn)(ember_x)
    out.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(ember_x.grad, eager_x.grad)


def spd(x):
    return x @ x.T + 4 * torch.eye(x.shape[0])


# ---------------------------------------------------------------------------------------------- effectful ops

LINALG = {
    "cholesky": lambda x: torch.linalg.cholesky(spd(x)),
    "inv": lambda x: torch.linalg.inv(spd(x)),
    "solve": lambda x: torch.linalg.solve(spd(x), x),
    "lu_factor": lambda x: torch.linalg.lu_factor(spd(x))[0],
    "tensorinv": lambda x: torch.linalg.tensorinv(spd(x), ind=1),
    "tensorsolve": lambda x: torch.linalg.tensorsolve(spd(x), x[0]),
}


@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_with_error_check_matches_eager(frontend, name):
    assert_same_as_eager(frontend, LINALG[name], torch.randn(4, 4))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_cholesky_of_indefinite_matrix_raises_like_eager(frontend, requires_grad):
    fn = lambda x: torch.linalg.cholesky(x @ x.T - 4 * torch.eye(4))  # noqa: E731
    x = torch.randn(4, 4, requires_grad=requires_grad)
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        fn(x)
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        compile_with(frontend, fn)(x)


def test_inv_of_singular_matrix_raises_like_eager(frontend):
    fn = lambda x: torch.linalg.inv(x - x)  # noqa: E731
    with pytest.raises(torch.linalg.LinAlgError):
        compile_with(frontend, fn)(torch.randn(4, 4, requires_grad=True))


# ---------------------------------------------------------------------------------------------- aten.copy


def test_circular_pad_matches_eager(frontend):
    assert_same_as_eager(frontend, lambda x: F.pad(x[None], (1, 1), mode="circular"), torch.randn(4, 4))


def test_diff_and_matrix_power_match_eager(frontend):
    assert_same_as_eager(frontend, lambda x: torch.diff(x) * torch.linalg.matrix_power(x, 3)[:, 1:], torch.randn(4, 4))


def test_copy_into_wider_dtype_broadcasts_and_casts_gradient(frontend):
    def fn(x):
        y = torch.zeros(3, 4, 4, dtype=torch.float64)
        y.copy_(x)
        return y * torch.arange(3, dtype=torch.float64)[:, None, None]

    assert_same_as_eager(frontend, fn, torch.randn(4, 4))


# ---------------------------------------------------------------------------------------------- finite gradients

FINITE = {
    "log_ndtr": (lambda x: torch.special.log_ndtr(x * 20), torch.randn(4, 4)),
    "log_ndtr_far_left": (torch.special.log_ndtr, torch.linspace(-60, 10, 15)),
    "safe_softmax_masked_row": (
        lambda x: torch.ops.aten._safe_softmax(x.masked_fill(torch.eye(4, dtype=torch.bool) | (torch.arange(4) == 2),
                                                             float("-inf")), -1),
        torch.randn(4, 4),
    ),
    "safe_softmax_fully_masked_row": (  # a row of the input itself all -inf: its gradient is 0 in eager
        lambda x: torch.ops.aten._safe_softmax(x, -1),
        torch.randn(4, 4).index_fill(0, torch.tensor([1]), float("-inf")),
    ),
    "norm_at_zero": (lambda x: torch.linalg.norm(x * 0), torch.randn(4, 4)),
    "cosine_similarity_with_zero": (lambda x: F.cosine_similarity(x, x * 0), torch.randn(4, 4)),
    "atanh_near_one": (torch.atanh, torch.tensor([0.9999999, -0.9999999, 1 - 2**-24, -1 + 2**-24, 0.5])),
}


@pytest.mark.parametrize("name", sorted(FINITE))
def test_gradient_as_finite_as_eager(frontend, name):
    fn, x = FINITE[name]
    assert_same_as_eager(frontend, fn, x)


# ---------------------------------------------------------------------------------------------- random ops


@pytest.mark.parametrize("autograd", ["ember", "eager"])
def test_rrelu_gradient_is_eagers_noise(frontend, autograd):
    """rrelu in training draws a slope per element into a `noise` buffer it writes in place. Functionalized, the
    op becomes `rrelu_with_noise_functional`, whose ATen derivative reads the buffer as it was *before* the draw
    (empty): the gradient came back all zeros, silently. From the same seed, ember's slopes and gradient are
    eager's, with ember's joint graph and with the graph run under eager autograd (interpreter codegen)."""

    def fn(x):
        return F.rrelu(x, training=True) * 2

    x = torch.randn(64)
    eager_x, ember_x = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    torch.manual_seed(7)
    eager = fn(eager_x)
    eager.sum().backward()
    options = {"frontend": frontend} if autograd == "ember" else {"frontend": frontend, "autograd": "eager"}
    compiled = ember.compile(fn, options=options)
    torch.manual_seed(7)
    out = compiled(ember_x)
    out.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(ember_x.grad, eager_x.grad)
    assert (eager_x.grad[x < 0] < 2).all()  # the slopes are drawn, not 1


# ---------------------------------------------------------------------------------------------- bfloat16 sums


@pytest.mark.parametrize("op", ["index_select", "embedding", "advanced_index"])
def test_bfloat16_gradient_summed_over_repeated_indices_is_as_accurate_as_eager(frontend, op):
    """The gradient of a gather with repeated indices is an accumulating `index_put`; ATen's kernel adds one
    element at a time in bfloat16. ember accumulates in float32 and rounds once: no further from the float32
    gradient than eager's."""
    fns = {
        "index_select": lambda x, i: x.index_select(0, i),
        "embedding": lambda x, i: F.embedding(i, x),
        "advanced_index": lambda x, i: x[i],
    }
    fn = fns[op]
    torch.manual_seed(0)
    x, index = torch.randn(4, 3), torch.randint(0, 4, (300,))
    w = torch.randn(300, 3)

    def grad(f, dtype):
        leaf = x.detach().to(dtype).clone().requires_grad_()
        (f(leaf, index) * w.to(dtype)).sum().backward()
        return leaf.grad.float()

    ref = grad(fn, torch.float32)
    eager_err = (grad(fn, torch.bfloat16) - ref).abs().max()
    ember_err = (grad(compile_with(frontend, fn), torch.bfloat16) - ref).abs().max()
    assert ember_err <= eager_err


def test_bfloat16_renorm_gradient_is_as_accurate_as_eagers(frontend):
    """renorm stays one ATen call, differentiated by eager's formula (sums in float32, rounds once): through its
    decomposition, the bfloat16 gradient rounded twice more and missed eager's by an ulp. The formula's ops fused
    round less often than eager's (lowering's keep-float32), so the gradient is judged against float64: no further
    from it than eager's."""
    torch.manual_seed(0)
    x = torch.randn(5, 5, 5, dtype=torch.bfloat16)
    w = torch.randn(5, 5, 5, dtype=torch.bfloat16)

    def fn(x):
        return torch.renorm(x, 2, 1, 0.5) * w.to(x.dtype)

    def run(f, dtype):
        leaf = x.detach().to(dtype).requires_grad_()
        out = f(leaf)
        out.sum().backward()
        return out.double(), leaf.grad.double()

    exact_out, exact_grad = run(fn, torch.float64)
    eager_out, eager_grad = run(fn, torch.bfloat16)
    out, grad = run(compile_with(frontend, fn), torch.bfloat16)
    torch.testing.assert_close(out, eager_out, rtol=1.6e-2, atol=1e-5)  # bfloat16 tolerances, in float64
    assert (out - exact_out).abs().max() <= (eager_out - exact_out).abs().max()
    assert (grad - exact_grad).abs().max() <= (eager_grad - exact_grad).abs().max()


# ---------------------------------------------------------------------------------------------- float32 rounding


def test_multiply_add_rounds_twice_as_eager(frontend):
    """x*x - 1 rounds the product, then the difference, as eager's kernels do; a fused multiply-add (what the C++
    compiler made of it before -ffp-contract=off) rounds once and gives 2**-11 + 2**-24 instead of 2**-11."""
    x = torch.full((64,), 1 + 2**-12)
    fn = lambda x: x * x - 1  # noqa: E731
    torch.testing.assert_close(compile_with(frontend, fn)(x), fn(x), rtol=0, atol=0)


def test_sum_of_short_rows_is_as_accurate_as_eager(frontend):
    """A reduction whose innermost reduced run is shorter than the accumulator's lanes once summed it in one
    chain: kron's gradient (rows of 20, 200 terms) was 5x further from the exact sum than eager's."""
    torch.manual_seed(0)
    x = torch.randn(5, 10, 5, 20) * 30
    fn = lambda x: x.sum((1, 3))  # noqa: E731
    exact = fn(x.double())
    eager_err = (fn(x).double() - exact).abs().max()
    ember_err = (compile_with(frontend, fn)(x).double() - exact).abs().max()
    assert ember_err <= 2 * eager_err
