"""The `dynamo` frontend: Dynamo captures, ember converts and runs; results, gradients and views equal eager's."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from ember_capture import DynamoFrontend
from ember_core import FallbackWarning
from torch.testing import assert_close


def wrap(fn, compile_graph, **options):
    return DynamoFrontend().wrap(fn, compile_graph, options)


def test_mlp_forward_and_backward_match_eager(compile_graph, events):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    x = torch.randn(5, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, expected = wrap(model, compile_graph)(x), ref(x_ref)
    assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    assert_close(x.grad, x_ref.grad)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad)
    graph = compile_graph.graphs[0]
    assert sorted(i.kind for i in graph.inputs) == ["param"] * 4 + ["user"]
    assert events.of("graph_captured")[0].graph is graph and events.of("guards_built")


def test_input_mutation_changes_the_callers_tensor(compile_graph):
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    out = wrap(f, compile_graph)(x)
    assert_close(x, torch.ones(3))
    assert_close(out, torch.full((3,), 2.0))
    assert compile_graph.graphs[0].inputs[0].mutated


def test_returned_view_of_input_is_a_real_view(compile_graph):
    def f(x):
        return x.t()[1:]

    x = torch.zeros(3, 4)
    out = wrap(f, compile_graph)(x)
    assert out._base is x and out.shape == (3, 3)
    x[2, 1] = 7.0
    assert out[0, 2] == 7.0


def test_shapes_10_8_10_compile_static_then_dynamic(compile_graph, events):
    compiled = wrap(lambda x: (x * 2).sum(), compile_graph)
    for n in (10, 8, 10):
        assert_close(compiled(torch.ones(n)), torch.tensor(2.0 * n))
    assert compile_graph.count == 2 and len(compile_graph.graphs[1].symbols) == 1
    assert "size mismatch at index 0. expected 10, actual 8" in events.of("recompiled")[0].message


def test_dynamic_false_recompiles_for_each_shape(compile_graph):
    compiled = wrap(lambda x: x + 1, compile_graph, dynamic=False)
    for n in (10, 8, 6):
        compiled(torch.ones(n))
    assert compile_graph.count == 3


def test_branch_on_tensor_value_is_correct_both_ways(compile_graph, events):
    def f(x):
        if x.mean() > 0.5:
            return x * 2
        return x - 1

    compiled = wrap(f, compile_graph)
    hi, lo = torch.ones(4), torch.zeros(4)
    assert_close(compiled(hi), hi * 2)
    assert_close(compiled(lo), lo - 1)


def test_two_graph_breaks_make_three_graphs(compile_graph, events):
    def f(x):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * 2
        torch._dynamo.graph_break()
        return x - 3

    x = torch.randn(4, requires_grad=True)
    out = wrap(f, compile_graph)(x)
    assert_close(out, (x + 1) * 2 - 3)
    out.sum().backward()
    assert_close(x.grad, torch.full((4,), 2.0))
    assert compile_graph.count == 3
    breaks = events.of("graph_break")
    assert len(breaks) == 2 and all("test_dynamo.py" in e.message for e in breaks)


def test_dropout_in_training_equals_eager_under_the_same_seed(compile_graph):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.4))
    ref = copy.deepcopy(model)
    x = torch.randn(16, 8)
    torch.manual_seed(7)
    out = wrap(model, compile_graph)(x)
    torch.manual_seed(7)
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
        x = torch.randn(8, 4, requires_grad=True)
        out = compiled(x)
        assert_close(out, ref(x))
        out.sum().backward()
    assert_close(model.running_mean, ref.running_mean)
    assert_close(model.running_var, ref.running_var)
    assert model.num_batches_tracked.item() == 2 and not model.running_mean.requires_grad


def test_integer_bool_and_bfloat16(compile_graph):
    def f(a, b, m, h):
        return (a * b + 3) // 2, m & ~m.flip(0), h * 2 + 1

    a, b = torch.randint(0, 9, (6,)), torch.randint(0, 9, (6,), dtype=torch.int32)
    m, h = torch.tensor([True, False, True]), torch.randn(4, dtype=torch.bfloat16, requires_grad=True)
    out, expected = wrap(f, compile_graph)(a, b, m, h), f(a, b, m, h)
    for got, want in zip(out, expected):
        assert got.dtype == want.dtype
        assert_close(got, want)
    out[2].float().sum().backward()
    assert_close(h.grad, torch.full((4,), 2.0, dtype=torch.bfloat16))


def test_backend_works_as_a_plain_dynamo_backend(compile_graph):
    backend = DynamoFrontend().backend(compile_graph, {})
    compiled = torch.compile(lambda x: torch.sin(x) * 2, backend=backend)
    x = torch.randn(3)
    assert_close(compiled(x), torch.sin(x) * 2)
    assert compile_graph.count == 1


def test_hook_registered_inside_the_graph_runs_that_graph_eagerly(compile_graph, events):
    def f(x):
        y = x * 3
        y.register_hook(lambda g: g * 10)
        return y.sum()

    x = torch.randn(4, requires_grad=True)
    with pytest.warns(FallbackWarning, match="graph dynamo_0_0 of f runs eagerly.*tensor hook") as told:
        wrap(f, compile_graph)(x).backward()
    assert_close(x.grad, torch.full((4,), 30.0))
    assert "tensor hook" in events.of("fallback")[0].message and compile_graph.count == 0
    [warned] = [w for w in told if w.category is FallbackWarning]
    assert warned.filename == __file__ and events.of("fallback")[0].data["where"] == f"{__file__}:{warned.lineno}"


def test_symbolic_int_inputs_renamed_to_canonical_symbols_still_bind(compile_graph):
    def f(x, k):
        return x.view(-1) * k + x.shape[0]

    compiled = wrap(f, compile_graph, dynamic=True)
    for shape, k in (((4, 3), 2), ((6, 5), 7)):
        x = torch.randn(shape)
        assert_close(compiled(x, k), f(x, k))
    graph = compile_graph.graphs[0]
    assert compile_graph.count == 1
    assert [i.name for i in graph.inputs if graph.values[i.name].type == "sym"] == ["s0", "s1", "s2"]
    assert [s.name for s in graph.symbols] == ["s0", "s1"]


def test_no_grad_region_blocks_gradients_like_eager(compile_graph):
    """Dynamo's graph toggles grad mode around the region; the detach where grad resumes must survive capture."""
    def f(x):
        with torch.no_grad():
            scale = x * 3
        return (x * scale).sum()

    x = torch.randn(4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    wrap(f, compile_graph)(x).backward()
    f(x_ref).backward()
    assert_close(x.grad, x_ref.grad)
    assert "aten.detach.default" in [n.op for n in compile_graph.graphs[0].nodes]


def _add_then_double(a, b):
    a.add_(1)
    return b * 2


def test_written_argument_sharing_memory_goes_through_the_trace_frontend(compile_graph):
    compiled = wrap(_add_then_double, compile_graph)
    a, b = torch.zeros(6), torch.zeros(6)
    assert_close(compiled(a, b), torch.zeros(6))
    (graph,) = compile_graph.graphs
    x = torch.zeros(6)
    assert_close(compiled(x, x.view(6)), torch.full((6,), 2.0))
    assert_close(x, torch.ones(6))
    assert [i.name for i in compile_graph.graphs[-1].inputs] == ["a_base"]
    assert_close(compiled(a, b), torch.zeros(6))  # no sharing: the graph Dynamo made
    assert len(compile_graph.graphs) == 2


def test_graph_writing_no_argument_checks_no_sharing(compile_graph):
    compiled = wrap(lambda a, b: a * 2 + b, compile_graph)
    x = torch.randn(6)
    assert_close(compiled(x, x.view(6)), x * 3)
    assert len(compile_graph.graphs) == 1


def _optimize_without(keyword: str, original):
    """`torch._dynamo.eval_frame._optimize` as a torch without `keyword` has it (torch 2.11 and `recompile_limit`)."""
    signature = inspect.signature(original)

    def older(*args, **kwargs):
        if keyword in kwargs:
            raise TypeError(f"_optimize() got an unexpected keyword argument '{keyword}'")
        return original(*args, **kwargs)

    older.__signature__ = signature.replace(parameters=[p for p in signature.parameters.values() if p.name != keyword])
    return older


@pytest.mark.parametrize("keyword", [True, False], ids=["dynamo-takes-recompile_limit", "torch-2.11-dynamo"])
def test_recompile_limit_holds_with_or_without_dynamos_keyword(compile_graph, monkeypatch, keyword):
    """torch 2.11's Dynamo has no `recompile_limit` keyword (every compile raised TypeError at 045a3fc): the frontend
    looks for the keyword and otherwise sets Dynamo's limit for each call, leaving the process's value as it was."""
    eval_frame = torch._dynamo.eval_frame
    if not keyword:
        monkeypatch.setattr(eval_frame, "_optimize", _optimize_without("recompile_limit", eval_frame._optimize))
    elif "recompile_limit" not in inspect.signature(eval_frame._optimize).parameters:
        pytest.skip("this torch's Dynamo takes no recompile_limit")
    before = torch._dynamo.config.recompile_limit
    compiled = wrap(lambda x: x + 1, compile_graph, dynamic=False, recompile_limit=2)
    for n in (10, 8, 6, 4):
        assert_close(compiled(torch.ones(n)), torch.ones(n) + 1)
    assert compile_graph.count == 2
    assert torch._dynamo.config.recompile_limit == before
