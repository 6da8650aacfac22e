"""The `trace` frontend: guards, recompiles, dynamic sizes, fallbacks, module state; results equal eager's."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from ember_capture import CaptureError, TraceFrontend
from ember_core import FallbackWarning
from torch.testing import assert_close


def wrap(fn, compile_graph, **options):
    return TraceFrontend().wrap(fn, compile_graph, options)


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))


def test_mlp_forward_and_backward_match_eager(compile_graph):
    model, ref = mlp(), mlp()
    compiled = wrap(model, compile_graph)
    x = torch.randn(5, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, expected = compiled(x), ref(x_ref)
    assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    assert_close(x.grad, x_ref.grad)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad)
    assert [i.kind for i in compile_graph.graphs[0].inputs] == ["param"] * 4 + ["user"]


def test_input_mutation_changes_the_callers_tensor(compile_graph):
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    out = wrap(f, compile_graph)(x)
    assert_close(x, torch.ones(3))
    assert_close(out, torch.full((3,), 2.0))
    graph = compile_graph.graphs[0]
    assert graph.inputs[0].mutated and [o.kind for o in graph.outputs] == ["user", "mutation"]


def test_mutation_of_a_non_leaf_keeps_autograd(compile_graph):
    def f(y):
        y.mul_(3)
        return y.sum()

    w = torch.randn(4, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    wrap(f, compile_graph)(w * 1).backward()
    f(w_ref * 1).backward()
    assert_close(w.grad, w_ref.grad)


def test_returned_view_of_input_is_a_real_view(compile_graph):
    def f(x):
        return x.t()[1:]

    x = torch.zeros(3, 4)
    out = wrap(f, compile_graph)(x)
    assert out._base is x and out.shape == (3, 3)
    x[2, 1] = 7.0
    assert out[0, 2] == 7.0
    assert compile_graph.graphs[0].outputs[0].kind == "alias"


def test_returning_the_mutated_input_returns_it_itself(compile_graph):
    def f(x):
        return x.add_(1)

    x = torch.zeros(2)
    assert wrap(f, compile_graph)(x) is x
    assert_close(x, torch.ones(2))


def test_mutating_a_view_input_writes_through_to_its_base(compile_graph):
    def f(v):
        return v.mul_(2).add_(1)

    base, expected_base = torch.ones(4, 4), torch.ones(4, 4)
    view = base.t()[1:]
    out = wrap(f, compile_graph)(view)
    expected = f(expected_base.t()[1:])
    assert_close(base, expected_base)
    assert out is view and out.stride() == expected.stride()


def test_automatic_dynamic_one_static_one_dynamic_compile_then_hits(compile_graph, events):
    compiled = wrap(lambda x: (x * 2).sum(0), compile_graph)
    for n in (10, 8, 10, 5):
        assert_close(compiled(torch.ones(n)), torch.tensor(2.0 * n))
    assert compile_graph.count == 2 and compiled.compiles == 2
    assert compile_graph.graphs[0].symbols == () and len(compile_graph.graphs[1].symbols) == 1
    assert [e.message for e in events.of("recompiled")] == ["<lambda>: x: size of dim 0 changed from 10 to 8"]


def test_dynamic_false_recompiles_for_each_shape(compile_graph):
    compiled = wrap(lambda x: x + 1, compile_graph, dynamic=False)
    for n in (10, 8, 10, 6):
        compiled(torch.ones(n))
    assert compile_graph.count == 3 and all(g.symbols == () for g in compile_graph.graphs)


def test_dynamic_true_compiles_once_with_symbols(compile_graph):
    compiled = wrap(lambda x, y: x @ y, compile_graph, dynamic=True)
    for n in (3, 5, 9):
        a, b = torch.randn(n, 4), torch.randn(4, n + 1)
        assert_close(compiled(a, b), a @ b)
    assert compile_graph.count == 1 and len(compile_graph.graphs[0].symbols) == 3


def test_a_new_default_dtype_recompiles_with_the_reason(compile_graph, events):
    compiled = wrap(lambda x: x + torch.ones(3), compile_graph)
    x = torch.ones(3, dtype=torch.float64)
    compiled(x)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        compiled(x)
    finally:
        torch.set_default_dtype(before)
    assert compile_graph.count == 2
    assert "default dtype changed from torch.float32 to torch.float64" in events.of("recompiled")[0].message


def test_symbolic_range_guard_recompiles_for_size_one(compile_graph, events):
    compiled = wrap(lambda x: x.sum(), compile_graph, dynamic=True)
    compiled(torch.ones(4))
    compiled(torch.ones(1))
    assert compile_graph.count == 2
    assert "shape guard failed: 2 <= x.size()[0]" in events.of("recompiled")[0].message


def test_guards_cover_dtype_requires_grad_grad_mode_and_scalars(compile_graph, events):
    compiled = wrap(lambda x, k: x * k, compile_graph)
    x = torch.ones(3)
    compiled(x, 2)
    compiled(x, 2)
    compiled(x.double(), 2)
    compiled(x, 3)
    compiled(x.requires_grad_(), 3)
    with torch.no_grad():
        compiled(x, 3)
    reasons = [e.message for e in events.of("recompiled")]
    expected = ["x: dtype changed from torch.float32 to torch.float64", "k: changed from 2 to 3",
                "x: requires_grad changed from False to True", "grad mode changed from True to False"]
    assert all(want in got for want, got in zip(expected, reasons, strict=True))
    assert compile_graph.count == 5


def test_python_scalars_are_specialized_by_value(compile_graph, events):
    compiled = wrap(lambda x, k: x * k, compile_graph)
    x = torch.ones(2)
    assert_close(compiled(x, 2), x * 2)
    assert_close(compiled(x, 3), x * 3)
    assert events.of("recompiled")[0].message.endswith("k: changed from 2 to 3")


def test_a_float_argument_a_branch_reads_is_kept_constant_and_compiled_per_value(compile_graph, events):
    """A float argument that changed becomes a graph input (automatic dynamic); when the trace then branches on it
    (hardtanh checks its bounds are in order), the trace cannot know the way for every value. The function
    compiles again with its floats constant, as before they changed, once per value up to the recompile limit:
    it ran eagerly for good."""
    compiled = wrap(lambda x, s: torch.nn.functional.hardtanh(x, -s, s), compile_graph)
    x = torch.linspace(-2, 2, 9)
    for s in (0.5, 0.75, 1.5, 0.75):
        assert_close(compiled(x, s), torch.nn.functional.hardtanh(x, -s, s))
    assert compiled.fallback_reason is None and not events.of("fallback")
    assert compile_graph.count == 3 and compiled.compiles == 3
    assert not [i.name for g in compile_graph.graphs for i in g.inputs if g.values[i.name].dtype == "float64"]
    kept = [e.message for e in events.of("recompiled") if "float arguments stay constant" in e.message]
    assert len(kept) == 1 and "data-dependent" in kept[0], [e.message for e in events.of("recompiled")]


def test_kwargs_and_nested_containers(compile_graph):
    def f(xs, *, scale):
        return {"sum": xs[0] + xs[1]["b"], "scaled": xs[0] * scale}

    a, b = torch.randn(3), torch.randn(3)
    out = wrap(f, compile_graph)([a, {"b": b}], scale=0.5)
    assert_close(out["sum"], a + b)
    assert_close(out["scaled"], a * 0.5)


def test_branch_on_tensor_value_falls_back_to_eager(compile_graph, events):
    def f(x):
        if x.mean() > 0.5:
            return x * 2
        return x - 1

    compiled = wrap(f, compile_graph)
    hi, lo = torch.ones(4), torch.zeros(4)
    with pytest.warns(FallbackWarning, match=r"f runs eagerly .*test_trace.py:\d+: data-dependent") as told:
        assert_close(compiled(hi), hi * 2)
        assert_close(compiled(lo), lo - 1)
    assert compiled.fallback_reason is not None and compile_graph.count == 0
    [warned] = [w for w in told if w.category is FallbackWarning]  # once, not once per call
    assert warned.filename == __file__ and "if x.mean() > 0.5:" in str(warned.message)
    [event] = events.of("fallback")
    assert "test_trace.py" in event.message and event.data["code"] == "if x.mean() > 0.5:"
    assert event.data["where"] == f"{__file__}:{warned.lineno}" and event.data["break_reason"].startswith("data-")


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "after-a-compile"])
def test_a_call_under_a_functorch_transform_runs_eagerly_and_is_told_once(compile_graph, events, warm):
    """vmap and grad hand the function wrapped tensors: traced, they failed inside the trace (an internal assert);
    through a compiled entry, whose guards pass them, the kernels asked a wrapped tensor for its data pointer. Such
    a call runs the function eagerly, each time, reported once; calls outside a transform still compile."""
    def f(x, w):
        return (x @ w).tanh().sum()

    x, w, xs = torch.randn(4, 3), torch.randn(3, 5), torch.randn(7, 4, 3)
    compiled = wrap(f, compile_graph)
    if warm:
        assert_close(compiled(x, w), f(x, w))
    with pytest.warns(FallbackWarning, match=r"f runs eagerly under a functorch transform") as told:
        for _ in range(2):
            assert_close(torch.func.grad(compiled, argnums=1)(x, w), torch.func.grad(f, argnums=1)(x, w))
            assert_close(torch.func.vmap(compiled, in_dims=(0, None))(xs, w),
                         torch.func.vmap(f, in_dims=(0, None))(xs, w))
    assert len([w for w in told if w.category is FallbackWarning]) == 1
    assert len(events.of("fallback")) == 1 and compiled.fallback_reason is None
    assert_close(compiled(x, w), f(x, w))
    assert compile_graph.count == 1


def test_branch_on_tensor_value_raises_naming_the_line_under_fullgraph(compile_graph):
    def f(x):
        if x.mean() > 0.5:
            return x * 2
        return x

    with pytest.raises(CaptureError, match=r"test_trace\.py:\d+") as info:
        wrap(f, compile_graph, fullgraph=True)(torch.ones(2))
    assert info.value.code == "if x.mean() > 0.5:"


def test_item_in_math_is_captured_and_a_branch_on_it_is_not(compile_graph, capsys):
    def uses_item(x):
        return x * x.sum().item()

    def branches_on_item(x):
        return x + 1 if x.sum().item() > 0 else x - 1

    def prints(x):
        print("hello")
        return x + 1

    compiled = wrap(uses_item, compile_graph, fullgraph=True)
    for x in (torch.ones(2), torch.tensor([3.0, -5.0])):
        assert_close(compiled(x), uses_item(x))
    assert compiled.compiles == 1
    assert "aten._local_scalar_dense.default" in {n.op for n in compiled.entries[0].graph.nodes}
    with pytest.raises(CaptureError, match="data-dependent"):
        wrap(branches_on_item, compile_graph, fullgraph=True)(torch.ones(2))
    with pytest.raises(CaptureError, match="print") as info:
        wrap(prints, compile_graph, fullgraph=True)(torch.ones(2))
    assert info.value.code == 'print("hello")'
    compiled = wrap(prints, compile_graph)
    assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert capsys.readouterr().out == "hello\n"


def test_a_retained_grad_or_a_leaf_made_inside_is_refused_naming_it(compile_graph):
    """Neither fits a graph: `retain_grad` keeps the grad on the traced tensor, not on the graph's output, and a
    leaf made inside is the very tensor eager accumulates into. Under fullgraph they raise; else they run eagerly."""
    def retains(x):
        y = x * 2
        y.retain_grad()
        return y

    def makes_a_leaf(x):
        z = x.detach() * 2
        z.requires_grad_()
        return z * x

    x = torch.ones(2, requires_grad=True)
    with pytest.raises(CaptureError, match=r"retain_grad\(\)"):
        wrap(retains, compile_graph, fullgraph=True)(x)
    with pytest.raises(CaptureError, match="made a leaf"):
        wrap(makes_a_leaf, compile_graph, fullgraph=True)(x)
    y = wrap(retains, compile_graph)(x)
    y.sum().backward()
    assert_close(y.grad, torch.ones(2))


def test_a_generator_argument_is_refused_before_tracing(compile_graph):
    def draws(x, gen):
        return x + torch.randn(x.shape, generator=gen)

    with pytest.raises(CaptureError, match="'gen' is a torch.Generator"):
        wrap(draws, compile_graph, fullgraph=True)(torch.zeros(2), torch.Generator())


def test_recompile_limit_warns_and_runs_eagerly(compile_graph, events):
    compiled = wrap(lambda x, k: x + k, compile_graph, recompile_limit=2)
    x = torch.zeros(2)
    compiled(x, 1)
    compiled(x, 2)
    with pytest.warns(UserWarning, match=r"<lambda> reached recompile_limit \(2\).*k: changed from 2 to 3"):
        assert_close(compiled(x, 3), x + 3)
    assert compile_graph.count == 2 and events.of("fallback")


def test_dropout_in_training_equals_eager_under_the_same_seed(compile_graph):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.4))
    ref = copy.deepcopy(model)
    compiled = wrap(model, compile_graph)
    x = torch.randn(16, 8)
    torch.manual_seed(123)
    out = compiled(x)
    torch.manual_seed(123)
    expected = ref(x)
    assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    assert_close(model[0].weight.grad, ref[0].weight.grad)


def test_batchnorm_training_updates_running_stats(compile_graph):
    model = torch.nn.BatchNorm1d(4)
    ref = copy.deepcopy(model)
    compiled = wrap(model, compile_graph)
    for _ in range(2):
        x = torch.randn(8, 4)
        assert_close(compiled(x), ref(x))
    assert_close(model.running_mean, ref.running_mean)
    assert_close(model.running_var, ref.running_var)
    assert model.num_batches_tracked.item() == 2 and not model.running_mean.requires_grad
    kinds = {i.name: (i.kind, i.mutated) for i in compile_graph.graphs[0].inputs}
    assert kinds["running_mean"] == ("buffer", True)


def test_eval_mode_is_guarded(compile_graph, events):
    model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    compiled = wrap(model, compile_graph)
    x = torch.ones(50)
    compiled(x)
    model.eval()
    assert_close(compiled(x), x)
    assert "module Sequential: training changed from True to False" in events.of("recompiled")[0].message


def test_replaced_parameter_is_guarded(compile_graph):
    model = torch.nn.Linear(2, 2)
    compiled = wrap(model, compile_graph)
    x = torch.ones(1, 2)
    compiled(x)
    model.weight = torch.nn.Parameter(torch.zeros(2, 2))
    assert_close(compiled(x), model(x))
    assert compile_graph.count == 2


def test_global_module_state_is_lifted(compile_graph):
    compiled = wrap(_uses_global_model, compile_graph)
    x = torch.randn(2, 3)
    compiled(x).sum().backward()
    assert _GLOBAL_MODEL.weight.grad is not None
    assert {i.kind for i in compile_graph.graphs[0].inputs} == {"param", "user"}


_GLOBAL_MODEL = torch.nn.Linear(3, 1)


def _uses_global_model(x):
    return _GLOBAL_MODEL(x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_and_bool_tensors(compile_graph, dtype):
    def f(a, b):
        return (a & b) if dtype is torch.bool else (a * b + 3) // 2

    a, b = torch.randint(0, 5, (6,)).to(dtype), torch.randint(0, 5, (6,)).to(dtype)
    assert_close(wrap(f, compile_graph)(a, b), f(a, b))


def test_bfloat16_forward_and_backward(compile_graph):
    model = torch.nn.Linear(4, 4).to(torch.bfloat16)
    ref = copy.deepcopy(model)
    x = torch.randn(3, 4, dtype=torch.bfloat16)
    out, expected = wrap(model, compile_graph)(x), ref(x)
    assert out.dtype == torch.bfloat16
    assert_close(out, expected)
    out.float().sum().backward()
    expected.float().sum().backward()
    assert_close(model.weight.grad, ref.weight.grad)


def test_no_grad_region_blocks_gradients_like_eager(compile_graph):
    def f(x):
        with torch.no_grad():
            scale = x * 3
        return (x * scale).sum()

    x = torch.randn(4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    wrap(f, compile_graph)(x).backward()
    f(x_ref).backward()
    assert_close(x.grad, x_ref.grad)


def test_guards_built_lists_each_guard_readably(compile_graph, events):
    compiled = wrap(lambda x, k: x * k, compile_graph)
    compiled(torch.ones(2, 3), 2)
    [event] = events.of("guards_built")
    guards = event.data["guards"]
    assert {"type(x) is Tensor", "x.dtype is torch.float32", "x.size() == (2, 3)", "type(k) is int and k == 2",
            "is_grad_enabled() is True"} <= set(guards), guards
    assert event.data["function"] == "<lambda>" and event.data["entry"] == 0


def test_hit_path_emits_no_events(compile_graph, events):
    compiled = wrap(lambda x: x + 1, compile_graph)
    x = torch.ones(2)
    compiled(x)
    before = len(events.events)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            compiled(x)
    assert len(events.events) == before
    assert events.of("guards_built")[0].source.startswith("def guard(flat, spec):")


def test_hook_registered_inside_the_function_runs_eagerly(compile_graph, events):
    def f(x):
        y = x * 3
        y.register_hook(lambda g: g * 10)
        return y.sum()

    x = torch.randn(4, requires_grad=True)
    wrap(f, compile_graph)(x).backward()
    assert_close(x.grad, torch.full((4,), 30.0))
    assert "register_hook" in events.of("fallback")[0].message


# ---------------------------------------------------------------------------------------------- globals and closures

_SHIFT = 1.0
_TABLE = torch.arange(3.0)


def _shifted(x):
    return x + _SHIFT + _TABLE


def test_changed_global_scalar_recompiles_and_says_why(compile_graph, events, monkeypatch):
    compiled = wrap(_shifted, compile_graph)
    x = torch.zeros(3)
    assert_close(compiled(x), _shifted(x))
    monkeypatch.setitem(globals(), "_SHIFT", 2.0)
    assert_close(compiled(x), _shifted(x))
    assert compile_graph.count == 2
    assert [e.get("reason") for e in events.of("recompiled")] == ["_SHIFT: changed from 1.0 to 2.0"]


def test_global_tensor_is_a_graph_input_read_on_every_call(compile_graph, monkeypatch):
    compiled = wrap(_shifted, compile_graph)
    x = torch.zeros(3)
    compiled(x)
    _TABLE.mul_(2)
    assert_close(compiled(x), _shifted(x))
    monkeypatch.setitem(globals(), "_TABLE", torch.full((3,), -1.0))
    assert_close(compiled(x), _shifted(x))
    assert compile_graph.count == 1
    inputs = compile_graph.graphs[0].inputs
    assert [(i.name, i.kind) for i in inputs] == [("TABLE", "buffer"), ("x", "user")]
    assert not any(compile_graph.graphs[0].constants)


def test_global_tensor_written_by_the_function_is_written_back(compile_graph, monkeypatch):
    counts = torch.zeros(2)

    def f(x):
        counts.add_(x)
        return counts * 1

    compiled = wrap(f, compile_graph)
    compiled(torch.ones(2))
    compiled(torch.ones(2))
    assert_close(counts, torch.full((2,), 2.0))
    assert compile_graph.graphs[0].inputs[0].mutated


# ---------------------------------------------------------------------------------------------- aliasing arguments

def _add_then_double(a, b):
    a.add_(1)
    return b * 2


def test_same_tensor_twice_is_one_input_and_guarded(compile_graph, events):
    compiled = wrap(_add_then_double, compile_graph)
    x = torch.zeros(3)
    assert_close(compiled(x, x), torch.full((3,), 2.0))
    assert_close(x, torch.ones(3))
    assert [i.name for i in compile_graph.graphs[0].inputs] == ["a"]
    y, z = torch.zeros(3), torch.zeros(3)
    assert_close(compiled(y, z), torch.zeros(3))
    assert events.of("recompiled")[0].get("reason") == "b is no longer the same tensor as a"


def test_a_write_through_a_view_argument_reaches_the_other(compile_graph, events):
    compiled = wrap(_add_then_double, compile_graph)
    x = torch.zeros(6)
    assert_close(compiled(x, x.view(2, 3)), torch.full((2, 3), 2.0))
    assert_close(x, torch.ones(6))
    graph = compile_graph.graphs[-1]
    assert [(i.name, i.mutated) for i in graph.inputs] == [("a_base", True)]
    assert any(n.op == "aten.as_strided.default" for n in graph.nodes)
    y = torch.zeros(6)
    assert_close(compiled(y, torch.zeros(2, 3)), torch.zeros(2, 3))
    assert events.of("recompiled")[-1].get("reason") == "b no longer shares memory with a"


def test_one_tensor_twice_beside_a_view_of_it(compile_graph):
    def f(a, b, c):
        a.add_(1)
        c.mul_(3)
        return b[:3] + c

    x, x_ref = torch.arange(6.0), torch.arange(6.0)
    assert_close(wrap(f, compile_graph)(x, x, x[1:4]), f(x_ref, x_ref, x_ref[1:4]))
    assert_close(x, x_ref)
    assert [i.name for i in compile_graph.graphs[0].inputs] == ["a_base"]


def test_one_tensor_twice_with_dynamic_sizes_compiles_once(compile_graph):
    compiled = wrap(lambda a, b: a * b, compile_graph, dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n)
        assert_close(compiled(x, x), x * x)
    assert compile_graph.count == 1


def test_sharing_arguments_of_a_pure_function_stay_separate_inputs(compile_graph):
    compiled = wrap(lambda a, b: a * 2 + b.sum(), compile_graph)
    x = torch.randn(6)
    assert_close(compiled(x, x.view(6)), x * 2 + x.sum())
    assert_close(compiled(torch.ones(6), torch.ones(6)), torch.full((6,), 8.0))
    assert compile_graph.count == 1 and len(compile_graph.graphs[0].inputs) == 2


def test_written_argument_that_starts_sharing_memory_recompiles(compile_graph, events):
    compiled = wrap(_add_then_double, compile_graph)
    compiled(torch.zeros(4), torch.zeros(4))
    x = torch.zeros(4)
    assert_close(compiled(x, x.view(4)), torch.full((4,), 2.0))
    assert events.of("recompiled")[0].get("reason") == "a now shares memory with b, and the graph writes a"


def test_written_argument_sharing_memory_with_one_that_needs_grad_runs_eagerly(compile_graph, events):
    w = torch.randn(6, requires_grad=True)
    base = w * 1
    compiled = wrap(_add_then_double, compile_graph)
    out = compiled(base[:4], base[2:])
    w_ref = w.detach().clone().requires_grad_()
    base_ref = w_ref * 1
    expected = _add_then_double(base_ref[:4], base_ref[2:])
    assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    assert_close(w.grad, w_ref.grad)
    assert "share memory" in events.of("fallback")[0].message


def test_only_a_failure_inside_dynamo_resets_its_caches_of_torch_code(compile_graph, monkeypatch):
    """torch.cond compiles itself with Dynamo when called outside torch.compile; failing under the trace's modes,
    that compile left every later eager torch.cond in the process failing, so such a failure resets Dynamo's caches
    of torch's own code. A fallback Dynamo had no part in (a branch on data) resets nothing."""
    import ember_capture._patches as patches

    resets, reset = [], patches.forget_torch_code_compiles
    monkeypatch.setattr(patches, "forget_torch_code_compiles", lambda: (resets.append(1), reset()))
    branchy = wrap(lambda x: x * 2 if x.sum() > 0 else x - 1, compile_graph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_close(branchy(torch.ones(3)), torch.full((3,), 2.0))
        assert resets == []
        cond = lambda x: torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))  # noqa: E731
        x = torch.randn(4)
        assert_close(wrap(cond, compile_graph)(x), cond(x))
    assert resets == [1]


def test_a_patch_of_an_inherited_attribute_is_removed_again():
    """`SharedPatch` may replace an attribute the owner only inherits (`SymInt.__format__`, from object): while
    held, the owner has one of its own; afterwards it has none again, and the inherited one answers as before."""
    import torch
    from ember_capture._patches import ABSENT, SharedPatch

    seen = []
    patch = SharedPatch([(torch.SymInt, "__format__")], lambda k, original: seen.append(original) or (lambda s, f: ""))
    assert "__format__" not in vars(torch.SymInt)
    with patch.hold():
        assert "__format__" in vars(torch.SymInt) and seen == [ABSENT]
    assert "__format__" not in vars(torch.SymInt)


def test_checkpointed_calls_mark_their_nodes_as_dynamo_does(compile_graph):
    """`checkpoint(fn, x, use_reentrant=False)` under the trace: the nodes fn records carry a region and the
    recompute policy (what Dynamo's checkpoint op gives, so the partitioner recomputes them); the others none; two
    calls are two regions, numbered from 1; a thread that is not tracing runs torch's checkpoint unchanged."""
    from torch.utils.checkpoint import checkpoint

    def f(x):
        y = checkpoint(lambda t: t.sin().cos(), x, use_reentrant=False)
        y = checkpoint(lambda t: t.exp(), y, use_reentrant=False)
        return y.neg()

    x = torch.randn(4, requires_grad=True)
    assert_close(wrap(f, compile_graph)(x), f(x))
    marks = [(n.op, n.meta.get("checkpoint"), n.meta.get("checkpoint_policy")) for n in compile_graph.graphs[0].nodes]
    assert marks == [("aten.sin.default", "1", "prefer_recompute"), ("aten.cos.default", "1", "prefer_recompute"),
                     ("aten.exp.default", "2", "prefer_recompute"), ("aten.neg.default", None, None)]
    assert torch.utils.checkpoint._checkpoint_without_reentrant_generator.__module__ == "torch.utils.checkpoint"
