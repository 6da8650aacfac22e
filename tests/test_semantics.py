"""Python-level behaviour that torch.compile users rely on, through both frontends."""

from __future__ import annotations

import copy
import dataclasses

import ember
import pytest
import torch
import torch.nn.functional as F


def compile_with(frontend, fn, **kwargs):
    return ember.compile(fn, options={"frontend": frontend}, **kwargs)


def count(rec, kind):
    return len([e for e in rec.events if e.kind == kind])


def test_two_graph_breaks_give_three_graphs():
    def f(x):
        x = x.sin() + 1
        torch._dynamo.graph_break()
        x = x.cos() * 2
        torch._dynamo.graph_break()
        return x.exp()

    x = torch.randn(5)
    with ember.record_events() as rec:
        out = compile_with("dynamo", f)(x)
    torch.testing.assert_close(out, f(x))
    assert count(rec, "graph_captured") == 3


def test_branch_on_data_taken_both_ways(frontend):
    def f(x):
        if x.mean() > 0.5:
            return x * 2
        return x - 1

    compiled = compile_with(frontend, f)
    high, low = torch.full((4,), 0.9), torch.full((4,), 0.1)
    torch.testing.assert_close(compiled(high), high * 2)
    torch.testing.assert_close(compiled(low), low - 1)
    torch.testing.assert_close(compiled(high), high * 2)


def test_shapes_10_8_10_compile_twice_then_hit(frontend):
    def f(x):
        return (x * 3).relu().sum()

    compiled = compile_with(frontend, f)
    with ember.record_events() as rec:
        for n in (10, 8, 10):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
    # one static graph, one with the changed dim symbolic; the third call reuses the symbolic entry
    assert count(rec, "graph_captured") == 2


def test_dynamic_false_compiles_each_shape(frontend):
    compiled = compile_with(frontend, lambda x: x + 1, dynamic=False)
    with ember.record_events() as rec:
        for n in (10, 8, 6):
            compiled(torch.randn(n))
    assert count(rec, "graph_captured") == 3


def test_hook_on_an_input_is_honoured_in_backward(frontend):
    def f(x, w):
        return (x @ w).tanh().sum()

    seen = []
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    x.register_hook(lambda g: seen.append(g.clone()) or g * 2)
    compile_with(frontend, f)(x, w).backward()
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    f(x_ref, w_ref).backward()
    assert len(seen) == 1
    torch.testing.assert_close(x.grad, x_ref.grad * 2)
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_hook_registered_inside_the_function(frontend):
    def f(x):
        y = x * 3
        y.register_hook(lambda g: g * 10)
        return y.sum()

    x = torch.randn(4, requires_grad=True)
    compile_with(frontend, f)(x).backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 30.0))


def test_retain_grad_inside_the_function_fills_the_returned_tensors_grad(frontend):
    def f(x):
        y = x * 3
        y.retain_grad()
        return (y * y).sum(), y

    x = torch.randn(4, requires_grad=True)
    loss, y = compile_with(frontend, f)(x)
    loss.backward()
    torch.testing.assert_close(y.grad, 2 * y.detach())
    torch.testing.assert_close(x.grad, 18 * x.detach())


@pytest.mark.parametrize("how", ["requires_grad_", "setter"])
def test_a_leaf_made_inside_the_function_gets_its_gradient(frontend, how):
    """A tensor made a leaf that requires grad inside the function (a gradient taken with respect to an
    activation): eager accumulates into that very tensor, which a graph cannot hold."""
    def f(x):
        z = x.detach() * 2
        if how == "setter":
            z.requires_grad = True
        else:
            z.requires_grad_()
        return (z.sin() * x).sum(), z

    x = torch.randn(4, requires_grad=True)
    with ember.record_events() as rec:
        loss, z = compile_with(frontend, f)(x)
    loss.backward()
    assert z.requires_grad and z.is_leaf
    torch.testing.assert_close(z.grad, z.detach().cos() * x.detach())
    torch.testing.assert_close(x.grad, z.detach().sin())
    if frontend == "trace":
        assert ["made a leaf" in e.message for e in rec.kinds("fallback")] == [True]  # it runs eagerly, visibly


def test_random_draws_from_a_generator_passed_in_are_eagers(frontend):
    def f(x, gen):
        return x + torch.randn(x.shape, generator=gen)

    x = torch.zeros(5)
    ours, theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    compiled = compile_with(frontend, f)
    for _ in range(2):  # the generator moves on as in eager
        torch.testing.assert_close(compiled(x, ours), f(x, theirs), rtol=0, atol=0)


def test_a_negated_view_input_is_read_with_its_sign(frontend):
    """`z.conj().imag` is a real tensor whose negative bit ATen applies as it reads it; kernels reading its storage
    would drop the sign (Inductor does: torch 2.13). It runs in the interpreter codegen, visibly; the same function
    on a plain tensor still compiles."""
    def f(x, y):
        return x * 2 + y

    z, y = torch.randn(6, dtype=torch.complex64), torch.randn(6)
    negated, plain = z.conj().imag, z.imag.clone()
    assert negated.is_neg()
    compiled = compile_with(frontend, f)
    with ember.record_events() as rec:
        torch.testing.assert_close(compiled(plain, y), f(plain, y))
        torch.testing.assert_close(compiled(negated, y), f(negated, y))
        torch.testing.assert_close(compiled(plain, y), f(plain, y))
    assert [e.data["cause"] for e in rec.kinds("fallback")] == ["input"]
    assert [e.message.split()[-1] for e in rec.kinds("graph_compiled")] == ["cpp", "interpreter"]


def test_a_conjugated_complex_input_is_read_conjugated(frontend):
    def f(z):
        return z * (1 + 2j)

    z = torch.randn(5, dtype=torch.complex64)
    torch.testing.assert_close(compile_with(frontend, f)(z.conj()), f(z.conj()))


SIGN_VIEWS = {  # negated and conjugated views made inside the function, their values computed
    "imag of a conjugate": (lambda z: z.conj().imag * 2 + 1, lambda: torch.randn(5, dtype=torch.complex64)),
    "neg view": (lambda x: torch._neg_view(x) * 2 + 1, lambda: torch.randn(5)),
    "summed": (lambda x: torch.view_as_complex(x).conj().imag.sum(-1), lambda: torch.randn(5, 2)),
    # returned views of the input: rebuilt by eager (the function runs eagerly), bits and aliasing included
    "returned conjugate": (lambda z: z.conj(), lambda: torch.randn(5, dtype=torch.complex64)),
    "returned neg view": (lambda x: torch._neg_view(x), lambda: torch.randn(5)),
    "returned imag of a conjugate": (lambda z: z.conj().imag, lambda: torch.randn(5, dtype=torch.complex64)),
}


@pytest.mark.parametrize("case", SIGN_VIEWS)
def test_negated_and_conjugated_views_give_eagers_values(frontend, case):
    fn, make = SIGN_VIEWS[case]
    x = make()
    out, want = compile_with(frontend, fn)(x), fn(x)
    torch.testing.assert_close(out.resolve_conj().resolve_neg(), want.resolve_conj().resolve_neg())
    assert (out.is_conj(), out.is_neg(), out.data_ptr() == x.data_ptr()) == \
        (want.is_conj(), want.is_neg(), want.data_ptr() == x.data_ptr())


def test_gradients_through_negated_views_are_eagers(frontend):
    def f(x, w):
        return (torch.view_as_complex(x).conj().imag * w).sum() + torch._neg_view(w).pow(3).sum()

    x, w = torch.randn(4, 2, requires_grad=True), torch.randn(4, requires_grad=True)
    f(x, w).backward()
    want = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    compile_with(frontend, f)(x, w).backward()
    torch.testing.assert_close((x.grad, w.grad), want)


def test_factory_calls_follow_the_default_dtype_of_each_call(frontend):
    def f(x):
        return x + torch.ones(3) * 0.1 + torch.arange(3) / 3

    x = torch.randn(3, dtype=torch.float64)
    compiled = compile_with(frontend, f)
    torch.testing.assert_close(compiled(x), f(x), rtol=0, atol=0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.testing.assert_close(compiled(x), f(x), rtol=0, atol=0)  # was the float32 trace's, 2e-8 off
    finally:
        torch.set_default_dtype(before)


def test_item_and_print_inside_forward(frontend, capsys):
    def f(x):
        scale = x.abs().max().item()
        print("scale is positive:", scale > 0)
        return x / scale

    x = torch.randn(6)
    compiled = compile_with(frontend, f)
    torch.testing.assert_close(compiled(x), f(x))
    compiled(x)
    assert capsys.readouterr().out.count("scale is positive: True") == 3


def test_dropout_in_train_and_eval_mode(frontend):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    compiled = ember.compile(model, options={"frontend": frontend})
    x = torch.randn(16, 8)
    torch.manual_seed(1)
    eager = model(x)
    torch.manual_seed(1)
    torch.testing.assert_close(compiled(x), eager)
    assert (eager == 0).any()
    model.eval()
    torch.testing.assert_close(compiled(x), model(x))


# In-place random ops: ATen draws a contiguous tensor in vectorized blocks and any other one element by element in
# memory order, while a functional graph draws into a fresh tensor (a contiguous copy of a view with gaps;
# bernoulli's always contiguous): other numbers from the same seed. Capture refuses those (the function runs
# eagerly, visibly); on contiguous tensors the graph draws as eager does.
DRAWS_IN_PLACE = {
    "normal_ of a column slice": (lambda x: x[:, 1:].normal_() * 2, True),
    "uniform_ of every other column": (lambda x: x[:, ::2].uniform_(-1, 1) + x[:, 1::2], True),
    "bernoulli_ of a transpose": (lambda x: x.t().bernoulli_(0.3) + 1, True),
    "exponential_ of an input with gaps": (lambda x: x.exponential_() * 3, True),
    # its mask: bernoulli_ into empty_like of a transposed product
    "in-place dropout of a transpose": (lambda x: F.dropout(x.t() * 1, 0.5, True, inplace=True), True),
    "alpha_dropout of a transpose": (lambda x: F.alpha_dropout(x.t(), 0.5, True), True),
    "normal_ of a contiguous input": (lambda x: x.normal_(2.0, 0.5) - 1, False),
    "bernoulli_ of a row slice": (lambda x: x[2:].bernoulli_(0.7) * 2, False),
}


@pytest.mark.parametrize("name", DRAWS_IN_PLACE)
def test_in_place_random_ops_draw_eagers_numbers_under_the_same_seed(frontend, name):
    fn, refused = DRAWS_IN_PLACE[name]
    values = torch.randn(40, 18)

    def fresh():  # the same values, in the case's layout
        return torch.randn(40, 36)[:, ::2].copy_(values) if "gaps" in name else values.clone()

    want_x, got_x = fresh(), fresh()
    torch.manual_seed(7)
    want = fn(want_x)
    compiled = compile_with(frontend, fn)
    with ember.record_events() as rec:
        torch.manual_seed(7)
        got = compiled(got_x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got_x, want_x, rtol=0, atol=0)
    fallbacks = [e.message for e in rec.kinds("fallback")]
    assert len(fallbacks) == refused and all("draws" in m for m in fallbacks), fallbacks


def test_in_place_add_on_an_input_mutates_the_callers_tensor(frontend):
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    out = compile_with(frontend, f)(x)
    torch.testing.assert_close(x, torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))


def test_returning_a_view_of_the_input(frontend):
    def f(x):
        return x.t()[1:]

    x = torch.randn(3, 4)
    out = compile_with(frontend, f)(x)
    torch.testing.assert_close(out, f(x))
    x.add_(100)
    torch.testing.assert_close(out, x.t()[1:])  # a real view: it sees the later write


@pytest.mark.parametrize("view", ["expand", "permute_slice", "symbolic_expand"])
def test_a_returned_view_differentiates_as_its_view_ops(frontend, view):
    """A returned view is rebuilt on the caller's input by replaying the graph's view ops, so autograd sees eager's
    view ops: expand's backward sums in float and rounds once. Rebuilt by `as_strided`, the bfloat16 gradient of
    an expand was summed element by element in bfloat16, 2 ulps from eager's (and slower)."""
    fns = {
        "expand": lambda x: x.expand(5, 25, 25),
        "permute_slice": lambda x: x.permute(2, 0, 1)[:, 1:],
        "symbolic_expand": lambda x: x.expand(x.shape[0], 40, x.shape[0]),
    }
    fn = fns[view]
    x = torch.randn(5, 1, 1 if view != "permute_slice" else 3, dtype=torch.bfloat16)
    w = torch.randn(fn(x).shape, dtype=torch.bfloat16)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    (fn(xe) * w).sum().backward()
    out = compile_with(frontend, fn, dynamic=view.startswith("symbolic"))(xc)
    (out * w).sum().backward()
    assert out._base is xc
    torch.testing.assert_close(xc.grad, xe.grad, rtol=0, atol=0)


@pytest.mark.parametrize("view", ["int32", "complex", "complex_of_mutated"])
def test_a_returned_view_as_another_dtype_keeps_the_dtype(frontend, view):
    """`x.view(torch.int32)` has x's shape and strides: it was once returned as x itself, float32. A view_as_complex
    output came back float32 too (rebuilt by as_strided on the float input)."""

    def f(x):
        if view == "int32":
            return x.view(torch.int32)
        if view == "complex":
            return torch.view_as_complex(x)
        x.mul_(2)  # the view is then of a mutated input: not a chain of view ops, rebuilt by as_strided
        return torch.view_as_complex(x)

    x = torch.randn(5, 2)
    expected = f(x.clone())
    out = compile_with(frontend, f)(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)
    x.add_(1)
    torch.testing.assert_close(out, f(x.clone()) if view == "int32" else torch.view_as_complex(x))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_and_boolean_tensors(frontend, dtype):
    def f(a, b):
        if a.dtype == torch.bool:
            return a & b, a | ~b
        return a * b + 3, (a > b).sum(), a // 2

    a = torch.randint(0, 10, (5,)).to(dtype)
    b = torch.randint(1, 10, (5,)).to(dtype)
    for got, want in zip(compile_with(frontend, f)(a, b), f(a, b)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


ZERO_BOUND_CLAMPS = {
    "relu": F.relu, "relu6": F.relu6, "clamp_min": lambda x: x.clamp_min(0), "clamp": lambda x: x.clamp(0, 1),
    "clamp_max": lambda x: x.clamp_max(-0.0), "clamp_tensor": lambda x: x.clamp(torch.zeros(()), torch.zeros(())),
}


@pytest.mark.parametrize("name", list(ZERO_BOUND_CLAMPS))
def test_a_clamp_at_zero_keeps_a_zeros_sign_and_a_nan_as_eager(frontend, name):
    """relu(-0.0) is -0.0 in eager (a clamp keeps x where x equals its bound): kernels took the bound (+0.0), so
    `1 / relu(x)` gave +inf where eager gives -inf. 40 elements: vector lanes and a scalar tail."""
    fn = ZERO_BOUND_CLAMPS[name]
    x = torch.tensor([-0.0, 0.0, float("nan"), -1.0, 2.0] * 8 + [-0.0, 0.0, 0.5])
    for dtype in (torch.float32, torch.float64):
        got, want = compile_with(frontend, lambda x: 1 / fn(x))(x.to(dtype)), 1 / fn(x.to(dtype))
        torch.testing.assert_close(got, want, equal_nan=True)



def test_a_variance_that_overflows_float32_is_inf_as_in_eager_not_nan(frontend):
    """A row of 10 holding one -3.4e38: its squared deviations overflow, and eager's variance is inf. The C++
    kernel's two-pass moments (split-moments) subtracted s1^2 / n from that inf, where s1, the deviations' sum, holds
    the mean's rounding (~1e31): its square overflowed too, inf - inf gave NaN. Rows of 16 too (vector lanes).
    Not compared: the std of a row whose variance overflows float32 (a 1e30 in it), which eager computes in
    double (finite); ember's is inf, as Inductor's: a float32 variance's root."""
    for n in (10, 16):
        x = torch.linspace(-2.5, 7.0, 3 * n).reshape(3, n)
        x[0, 3], x[1, 6], x[2, 0] = -3.4e38, 3.4e38, 1e30
        fn = lambda x: (x.var(1), torch.var_mean(x, 1, correction=0))  # noqa: E731
        got, want = compile_with(frontend, fn)(x), fn(x)
        torch.testing.assert_close(got, want, equal_nan=False)


def _flex(x):
    from torch.nn.attention.flex_attention import flex_attention
    return flex_attention(x[None, None], x[None, None], x[None, None])[0, 0]


CONTROL_FLOW = {
    "cond": (lambda x: torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() - 1, (x,)), True),
    "while_loop": (lambda x: torch._higher_order_ops.while_loop(
        lambda i, t: i < 3, lambda i, t: (i + 1, t.sin() + 1), (torch.tensor(0), x))[1], True),
    "map": (lambda x: torch._higher_order_ops.map(lambda row: row.exp() * 2, x), True),
    "flex_attention": (_flex, False),  # no backward on the CPU in eager either
}


@pytest.mark.parametrize("name", list(CONTROL_FLOW))
def test_control_flow_ops_run_eagerly_and_visibly_with_eagers_results(frontend, name):
    """torch.cond, while_loop, map and flex_attention are higher-order ops whose subgraphs a graph of ATen ops has no
    place for: the compile raised NotImplementedError (dispatch's, from the capture's mode) out of the call. The
    graph now runs eagerly with a fallback event; under the trace frontend, whose failed trace had left Dynamo's
    caches of torch.cond failing, eager calls of the op afterwards still work."""
    fn, grad = CONTROL_FLOW[name]
    x = torch.randn(4, 8)
    for requires_grad in {False, grad}:
        torch._dynamo.reset()
        with ember.record_events() as rec:
            got = compile_with(frontend, fn)(x.clone().requires_grad_(requires_grad))
        torch.testing.assert_close(got, fn(x))
        assert count(rec, "fallback") == 1, [e.message for e in rec.events]
        torch.testing.assert_close(fn(x * 2), fn(x * 2))  # eager still runs the op


@pytest.mark.skipif(not hasattr(torch.compiler, "nested_compile_region"), reason="torch without nested regions")
def test_a_nested_compile_region_is_compiled_inline(frontend):
    """`torch.compiler.nested_compile_region` reaches the Dynamo frontend as `invoke_subgraph` calls of one
    subgraph: they crashed the compile as other higher-order ops did; the subgraph now runs inline at each call,
    in the one graph, forward and backward."""
    region = torch.compiler.nested_compile_region(lambda t: t.sin() * 2 + t)
    fn = lambda x: region(x) * region(x + 1).sigmoid()  # noqa: E731
    x = torch.randn(4, 8)
    with ember.record_events() as rec:
        compiled = compile_with(frontend, fn)
        got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = compiled(got_x), fn(want_x)
        got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x.grad, want_x.grad)
    assert count(rec, "fallback") == 0 and count(rec, "graph_compiled") >= 1


def test_ember_compile_called_inside_a_compiled_function_runs_its_model_inline(frontend):
    """`ember.compile(m)(x)` inside a function being compiled failed (Dynamo traced into `compile` and stopped at
    "already tracked for mutation"; make_fx cannot trace a Dynamo-optimized function); a nested torch.compile runs
    `m` inline in the outer graph, and so does ember's now."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    fn = lambda x: ember.compile(m)(x).sin()  # noqa: E731
    x = torch.randn(4, 8)
    got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = compile_with(frontend, fn)(got_x), m(want_x).sin()
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x.grad, want_x.grad)


@dataclasses.dataclass
class _Result:
    value: torch.Tensor
    count: int


def _closure_over_a_result(x):
    y = x.exp()
    return lambda: y


def test_a_dataclass_of_results_holds_real_tensors(frontend):
    """The trace frontend kept a returned dataclass (no pytree: one leaf) as a constant of the trace, so every call
    returned the trace's FakeTensor, with no error (a closure over a result too). Dynamo rebuilds it; the trace
    frontend now runs the function eagerly, visibly."""
    fn = lambda x, k: _Result(x.sin() * k, k + 1)  # noqa: E731
    x = torch.randn(5)
    compiled = compile_with(frontend, fn)
    with ember.record_events() as rec:
        results = [compiled(x, 3) for _ in range(2)]
    for got in results:
        assert type(got.value) is torch.Tensor and got.count == 4
        torch.testing.assert_close(got.value, x.sin() * 3)
    assert count(rec, "fallback") == (1 if frontend == "trace" else 0)
    torch.testing.assert_close(compile_with(frontend, _closure_over_a_result)(x)(), x.exp())


def test_sizes_returned_as_text_and_as_a_shape_are_the_calls_own(frontend):
    """Under dynamic shapes the trace frontend returned `f"rows={x.shape[0]}"` as "rows=s25" (the symbol's name) at
    every size, and `x.shape` as a plain tuple; a size turned into text now specializes the trace (a guard, as
    Dynamo does), and a returned torch.Size stays one."""
    fn = lambda x: (x * 2, f"rows={x.shape[0]}", x.shape, {"shape": x[0].shape})  # noqa: E731
    compiled = compile_with(frontend, fn, dynamic=True)
    for rows in (3, 5, 3):
        x = torch.randn(rows, 2)
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] and type(got[2]) is torch.Size and type(got[3]["shape"]) is torch.Size, got


def test_sizes_formatted_with_a_spec_are_the_calls_own(frontend):
    """A format spec on a symbolic size, or on a float or bool made of one (`f"{n:5d}"`, `f"{n / 2:.2f}"`), raised
    TypeError out of the trace frontend's trace (symbolic types have no `__format__` of their own), where eager and
    Dynamo give the text of the value."""
    def fn(x):
        n = x.shape[0]
        return x + 1, f"{n:5d}|{n:x}|{n / 2:.2f}|{n / 4!r}|{n > 4}|{n > 4:>6}|{'%d' % n}"  # noqa: UP031 - %-formatting of a size is a case

    compiled = compile_with(frontend, fn, dynamic=True)
    for rows in (3, 12, 300):
        x = torch.randn(rows, 2)
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]


def test_bfloat16_forward_and_backward(frontend):
    def f(x, w):
        return F.silu(x @ w).sum()

    x = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(8, 8, dtype=torch.bfloat16, requires_grad=True)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out = compile_with(frontend, f)(x, w)
    ref = f(xr, wr)
    out.backward()
    ref.backward()
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, xr.grad)


def test_a_bfloat16_chain_rounds_as_eager_and_thresholds_answer_as_eager(frontend):
    """Fused bfloat16 ops round each result to bfloat16 as eager stores it: the chain's error against float64 is
    eager's (up to the order of a sum), forward and backward; an op with a threshold (floor, a comparison) reads
    the rounded value, so its answers are eager's exactly."""
    def chain(x):
        return (torch.sigmoid(x) * torch.tanh(x * 3) + torch.exp(-x * x) * 0.5).sin().square().sum()

    def thresholds(x):
        y = x * 3.3
        return torch.floor(y), y * 1.7 > 2

    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)

    def error(fn, dtype):
        xr = x.detach().to(dtype).requires_grad_()
        out = fn(xr)
        out.backward()
        return out.double(), xr.grad.double()

    exact_out, exact_grad = error(chain, torch.float64)
    eager_out, eager_grad = error(chain, torch.bfloat16)
    got_out, got_grad = error(compile_with(frontend, chain), torch.bfloat16)
    assert (got_out - exact_out).abs() <= (eager_out - exact_out).abs() * 3 + 1e-3
    assert (got_grad - exact_grad).abs().mean() <= (eager_grad - exact_grad).abs().mean() * 1.1
    for got, want in zip(compile_with(frontend, thresholds)(x), thresholds(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_training_step_with_backward_inside_runs_equal_to_eager(frontend):
    """`loss.backward()` and `opt.step()` inside the compiled function: Dynamo breaks the graph there; the trace
    frontend cannot trace a backward that accumulates into `.grad` and runs the function eagerly, reported (it
    crashed in functionalization before)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    opt, twin_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))

    def step(model, opt, x):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    compiled = compile_with(frontend, step)
    with ember.record_events() as rec:
        for _ in range(3):
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(model, opt, x), step(twin, twin_opt, x))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)
    if frontend == "trace":
        assert any("backward()" in e.message for e in rec.kinds("fallback"))
    else:  # the engine runs the compiled backward: Dynamo, breaking the step's graph there, compiles no frame of it
        # (it did, taking the compiled-autograd branch: the backward ran as ATen calls, compiled again as new graphs)
        names = [e.graph.name for e in rec.kinds("graph_compiled")]
        assert any(n.endswith("_joint_backward") for n in names), names


@pytest.mark.parametrize("fn", [
    lambda i, x: torch.arange(5.0)[i] + x,
    lambda i, x: torch.zeros(5).index_select(0, i) + x,
    lambda i, x: torch.gather(torch.ones(3, 4), 1, i[1:].view(1, 1).expand(3, 1)) * x,
    lambda i, x: (x.expand(5) * 2)[i],
    lambda i, x: F.embedding(i, torch.ones(5, 2) * x),
], ids=["arange", "index_select-zeros", "gather-ones", "broadcast", "embedding-of-a-product"])
def test_an_index_out_of_range_raises_as_in_eager(frontend, fn):
    """A gather from values no load reads (an arange, a fill, a broadcast) with an index out of range raised
    nothing and returned a value that was never there (lowering inlined the values into the gather)."""
    x = torch.randn(1)
    compiled = compile_with(frontend, fn)
    torch.testing.assert_close(compiled(torch.tensor([1, 3]), x), fn(torch.tensor([1, 3]), x))
    bad = torch.tensor([1, 7])
    with pytest.raises((IndexError, RuntimeError)) as eager:
        fn(bad, x)
    with pytest.raises(eager.type):
        compiled(bad, x)


# Writes that eager refuses because the written tensor overlaps itself (an expanded view) or overlaps another
# operand in part (ATen's memory-overlap checks): a functional graph computes them as if every read came before
# every write, so a compiled function returned numbers where eager raised. Capture refuses them: the function runs
# eagerly, visibly, and raises eager's error.
OVERLAPPING_WRITES = {
    "add_ of a shifted slice": lambda x: x[1:].add_(x[:-1]) * 1,
    "copy_ of a shifted slice": lambda x: x[1:].copy_(x[:-1]) + 1,
    "mul_ of rows shifted by one": lambda x: x.view(4, 2)[1:].mul_(x.view(4, 2)[:-1]) - 1,
    "add_ into an expanded view": lambda x: x[:2].expand(3, 2).add_(1) * 2,
    "out= over part of an input": lambda x: torch.add(x[:-2], 1, out=x[2:]) + 1,
    "index_add_ of itself": lambda x: x.view(2, 4).index_add_(0, torch.tensor([1, 0]), x.view(2, 4)) * 1,
    "cat out= of its own halves": lambda x: torch.cat([x[4:], x[:4]], out=x) * 1,
}
# Writes eager runs element by element over memory another operand reads (layouts its overlap check calls too hard
# to judge): its result depends on the order it writes in, which a functional graph does not follow; and fills of
# an expanded view, which functionalization wrote back wrongly. Capture refuses them: eager's own numbers, visibly.
ORDER_DEPENDENT_WRITES = {
    "add_ of the previous column": lambda x: x.view(2, 4)[:, 1:].add_(x.view(2, 4)[:, :-1]) * 1,
    "add_ of a broadcast first element": lambda x: x.add_(x[:1].expand(8)) * 1,
    "mul_ of the next column": lambda x: x.view(2, 4)[:, :-1].mul_(x.view(2, 4)[:, 1:]) + 1,
    # eager fills each element once; functionalization wrote an expanded view back as the sum over its copies
    "fill_ of an expanded row": lambda x: x.view(2, 4)[:1].expand(3, 4).fill_(2) * 1,
    "zero_ of an expanded column": lambda x: x.view(2, 4)[:, :1].expand(2, 3).zero_() + x.view(2, 4)[:, 1:],
}
# Writes eager runs: the same tensor (full overlap), disjoint parts, and interleaved strided views (ATen does not
# check those); the graph gives eager's values with no fallback.
OVERLAP_FREE_WRITES = {
    "add_ of itself": lambda x: x.add_(x) * 1,
    "mul_ of the other half": lambda x: x[:4].mul_(x[4:]) + x[4:],
    "add_ of interleaved elements": lambda x: x[::2].add_(x[1::2]) * 1,
    "copy_ of a transpose into another buffer": lambda x: torch.empty(2, 4).copy_(x.view(4, 2).t()) + 1,
}


@pytest.mark.parametrize("name", OVERLAPPING_WRITES)
def test_a_write_that_overlaps_its_operands_raises_as_in_eager(frontend, name):
    fn = OVERLAPPING_WRITES[name]
    with pytest.raises(RuntimeError, match="unsupported operation") as eager:
        fn(torch.arange(8.0))
    compiled = compile_with(frontend, fn)
    x = torch.arange(8.0)
    with ember.record_events() as rec, pytest.raises(RuntimeError) as got:
        compiled(x)
    assert str(got.value) == str(eager.value)
    torch.testing.assert_close(x, torch.arange(8.0))
    assert any("overlap" in e.message for e in rec.kinds("fallback"))


@pytest.mark.parametrize("name", OVERLAP_FREE_WRITES)
def test_a_write_without_partial_overlap_is_compiled(frontend, name):
    fn = OVERLAP_FREE_WRITES[name]
    want_x = torch.randn(8)
    got_x = want_x.clone()
    want = fn(want_x)
    with ember.record_events() as rec:
        got = compile_with(frontend, fn)(got_x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x, want_x)
    assert not rec.kinds("fallback")


@pytest.mark.parametrize("name", ORDER_DEPENDENT_WRITES)
def test_a_write_over_memory_another_operand_reads_gives_eagers_numbers(frontend, name):
    fn = ORDER_DEPENDENT_WRITES[name]
    want_x, got_x = torch.arange(1.0, 9.0), torch.arange(1.0, 9.0)
    want = fn(want_x)
    with ember.record_events() as rec:
        got = compile_with(frontend, fn)(got_x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got_x, want_x, rtol=0, atol=0)
    assert any("memory overlap" in e.message for e in rec.kinds("fallback"))


# values where rounding x + v * (t1 / t2) once to float16 (eager's kernel: it computes in float32) and rounding
# after each of div, mul and add (what Dynamo's rewrite of `value=` into three ops gives) differ by one ulp
_ADDC = {"x": 5.10546875, "t1": 3.0390625, "t2": -0.061004638671875, "value": 3.14}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("call", ["addcdiv", "addcdiv_", "addcmul", "addcmul_"])
def test_addcdiv_and_addcmul_with_a_value_round_once_as_in_eager(frontend, call, dtype):
    """The sweep's float16 run found `torch.addcdiv(x, t1, t2, value=3.14)` one ulp off eager (and further from the
    float32 result): Dynamo writes the call as div, mul and add (`addcdiv_`/`addcmul_` as an op and `prims.fma`: a
    quarter of random float16 elements off), each of which ember rounds to float16 as eager rounds separate ops,
    where eager's kernel rounds once."""
    torch.manual_seed(0)
    x, t1, t2 = (torch.randn(64, dtype=dtype) for _ in range(3))
    x[0], t1[0], t2[0] = _ADDC["x"], _ADDC["t1"], _ADDC["t2"]
    value = _ADDC["value"]
    calls = {  # written out: a method reached through getattr is not what Dynamo rewrites
        "addcdiv": lambda x, t1, t2: torch.addcdiv(x, t1, t2, value=value),
        "addcmul": lambda x, t1, t2: torch.addcmul(x, t1, t2, value=value),
        "addcdiv_": lambda x, t1, t2: x.clone().addcdiv_(t1, t2, value=value),
        "addcmul_": lambda x, t1, t2: x.clone().addcmul_(t1, t2, value=value),
    }
    f = calls[call]
    with ember.record_events() as rec:
        got = compile_with(frontend, f)(x, t1, t2)
    assert rec.kinds("graph_compiled"), "the call was not compiled"
    torch.testing.assert_close(got, f(x, t1, t2), rtol=0, atol=0)
