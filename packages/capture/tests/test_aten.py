"""FX/Python → functional ATen Graph: mutations, aliases, symbols, decompositions, source lines, grad facts."""

from __future__ import annotations

import ember_core
import pytest
import torch
import torch.fx as fx
from conftest import CountingCompiler
from ember_capture import CaptureError, DynamoFrontend, TraceFrontend, capture_graph
from ember_capture._aten import readable_name
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.testing import assert_close


def fakes(*tensors, dynamic=False):
    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    out = []
    for t in tensors:
        dims = [DimDynamic.DYNAMIC if dynamic else DimDynamic.STATIC] * t.dim()
        out.append(mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims)))
    return out


def test_graph_is_functional_with_mutation_and_alias_outputs():
    def f(x, y):
        y.mul_(2)
        return x + y, x.t()

    graph = capture_graph(f, fakes(torch.randn(2, 3), torch.randn(2, 3)), input_names=["x", "y"])
    assert [(i.name, i.mutated) for i in graph.inputs] == [("x", False), ("y", True)]
    assert [(o.kind, o.input) for o in graph.outputs] == [("user", None), ("alias", 0), ("mutation", 1)]
    assert not any(n.op.endswith("_.Tensor") or "copy_" in n.op for n in graph.nodes)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    out = ember_core.interpret(graph, [x, y.clone()])
    assert_close(out[0], x + 2 * y)
    assert_close(out[2], 2 * y)


def test_dynamic_sizes_become_symbols():
    graph = capture_graph(lambda x: (x * 2).sum(0), fakes(torch.randn(5, 3), dynamic=True))
    assert [s.hint for s in graph.symbols] == [5, 3] and all(s.lower == 2 for s in graph.symbols)
    assert graph.values[graph.inputs[0].name].shape == tuple(s.name for s in graph.symbols)
    assert_close(ember_core.interpret(graph, [torch.ones(7, 4)])[0], torch.full((4,), 14.0))


def test_symbols_are_named_in_order_of_first_appearance():
    x = fakes(torch.randn(5, 3), dynamic=True)[0]
    graph = capture_graph(lambda x: x.t() * 2, [x])
    assert [s.name for s in graph.symbols] == ["s0", "s1"] and [s.hint for s in graph.symbols] == [5, 3]
    assert graph.values[graph.inputs[0].name].shape == ("s0", "s1")
    assert graph == ember_core.canonical_symbols(graph)


def pointwise_and_reduction(x, y):
    return (x * y + 1).sum(0), (x.exp() * 2.5).view(-1)


def captured_text(frontend) -> tuple[str, ember_core.Graph]:
    compiler = CountingCompiler()
    compiled = frontend.wrap(pointwise_and_reduction, compiler, {"dynamic": True})
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    assert_close(compiled(x, y), pointwise_and_reduction(x, y))
    (graph,) = compiler.graphs
    return str(graph.replace(name="f", producer="")), graph


def test_both_frontends_print_the_same_text():
    torch._dynamo.reset()
    dynamo, dynamo_graph = captured_text(DynamoFrontend())
    trace, _ = captured_text(TraceFrontend())
    dynamo_lines, trace_lines = dynamo.splitlines(), trace.splitlines()
    assert [ln for ln in dynamo_lines if not ln.startswith("def ")] == [
        ln for ln in trace_lines if not ln.startswith("def ")]
    # Dynamo passes the sizes as inputs too: named after their symbols, first, then the same tensors.
    assert dynamo_lines[2] == "def f(s0: sym:i64, s1: sym:i64, x: f32[s0, s1], y: f32[s0, s1]):"
    assert trace_lines[2] == "def f(x: f32[s0, s1], y: f32[s0, s1]):"
    assert ember_core.parse_graph(str(dynamo_graph)) == dynamo_graph


def test_random_ops_stay_whole():
    graph = capture_graph(lambda x: torch.nn.functional.dropout(x, 0.3, True), fakes(torch.randn(4)))
    assert [n.op for n in graph.nodes] == ["aten.native_dropout.default"]


def test_source_lines_and_module_paths_survive_a_graph_module():
    gm = fx.symbolic_trace(lambda x: torch.relu(x) * 2)
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["stack_trace"] = f'  File "/src/model.py", line {12 + len(node.name)}, in forward\n    y = ...\n'
            node.meta["nn_module_stack"] = {"m": ("L['self'].block", torch.nn.Module)}
    graph = capture_graph(gm, fakes(torch.randn(3)))
    assert {n.meta["source"] for n in graph.nodes} == {"model.py:16", "model.py:15"}
    assert {n.meta["module"] for n in graph.nodes} == {"block"}


def test_dynamo_placeholder_names_give_kinds_and_short_names():
    assert readable_name("L_self_modules_fc_parameters_weight_") == "fc_weight"
    assert readable_name("l_x_") == "x"
    gm = fx.symbolic_trace(lambda w, b, x: x * w + b)
    names = ["L_self_modules_fc_parameters_weight_", "L_self_modules_bn_buffers_running_mean_", "L_x_"]
    graph = capture_graph(gm, fakes(torch.randn(3), torch.randn(3), torch.randn(3)), input_names=names)
    assert [(i.name, i.kind) for i in graph.inputs] == [("fc_weight", "param"), ("bn_running_mean", "buffer"),
                                                        ("x", "user")]


def test_no_grad_region_becomes_detach_and_requires_grad_is_recorded():
    def f(x):
        with torch.no_grad():
            y = x * 3
        return x * y, y

    x = torch.randn(3, requires_grad=True)
    graph = capture_graph(f, fakes(x))
    assert "aten.detach.default" in [n.op for n in graph.nodes]
    assert [graph.values[o.name].requires_grad for o in graph.outputs] == [True, False]
    assert graph.values[graph.inputs[0].name].requires_grad


# ---------------------------------------------------------------------------------------------- where grad stops
# `_insert_no_grad_detaches` cuts gradient paths. Each case below pins a cut it must make (a no_grad region of the
# user's code is dead for gradients in eager) or must not make (a custom function's forward runs under no_grad,
# but its backward is the path), and checks the captured graph's gradients against eager's.


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        with torch.no_grad():  # already off inside forward; an explicit region must not change anything
            y = x * x
        return y * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad


def _graph_and_grads(f, x):
    """The captured graph, then its gradient (run in ember-core's interpreter) and eager's, for `f(x).sum()`."""
    graph = capture_graph(f, fakes(x))
    got = x.detach().clone().requires_grad_()
    ember_core.interpret(graph, [got])[0].sum().backward()
    want = x.detach().clone().requires_grad_()
    f(want).sum().backward()
    return graph, got.grad, want.grad


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_an_explicit_detach_stops_the_gradient():
    """The core ATen table decomposes `detach` to `aten.alias`, which says nothing about gradients; the graph must
    keep the detach and give eager's gradient (before the fix it flowed through the detached factor)."""
    graph, got, want = _graph_and_grads(lambda x: x.sin().detach() * x, torch.randn(4, requires_grad=True))
    detach = next(n for n in graph.nodes if n.op == "aten.detach.default")
    assert not graph.values[detach.outputs[0]].requires_grad
    assert "aten.alias.default" not in _ops(graph)
    torch.testing.assert_close(got, want)


def test_detach_in_place_stops_the_gradient_of_later_reads_only():
    def f(x):
        t = x.tanh()
        early = t + x  # read before detach_: the gradient flows through t here, as in eager (add saves nothing)
        t.detach_()
        return early + t * x

    graph, got, want = _graph_and_grads(f, torch.randn(4, requires_grad=True))
    assert _ops(graph).count("aten.detach.default") == 1
    torch.testing.assert_close(got, want)


def test_detach_in_place_of_an_input_that_requires_grad_is_refused():
    with pytest.raises(CaptureError, match="detach_"):
        capture_graph(lambda x: x.detach_() * 2, fakes(torch.randn(3, requires_grad=True)))


def test_detach_pass_cuts_a_no_grad_region_of_user_code_as_eager_does():
    def f(x):
        with torch.no_grad():
            scale = x.exp()
        return x * scale

    graph, got, want = _graph_and_grads(f, torch.randn(4, requires_grad=True))
    assert _ops(graph).count("aten.detach.default") == 1
    assert_close(got, want)


def test_detach_pass_leaves_a_custom_functions_forward_whole():
    graph, got, want = _graph_and_grads(lambda x: Cube.apply(x + 1), torch.randn(4, requires_grad=True))
    assert "aten.detach.default" not in _ops(graph) and "ember.custom_function.default" in _ops(graph)
    (call,) = [n for n in graph.nodes if n.op == "ember.custom_function.default"]
    assert graph.values[call.outputs[0]].requires_grad
    assert_close(got, want)


def test_detach_pass_cuts_a_custom_function_called_under_no_grad_by_the_user():
    """Under the user's no_grad the call needs no gradient: it runs inline and is cut where grad resumes."""
    def f(x):
        with torch.no_grad():
            y = Cube.apply(x)
        return x * y

    graph, got, want = _graph_and_grads(f, torch.randn(4, requires_grad=True))
    assert "ember.custom_function.default" not in _ops(graph) and "aten.detach.default" in _ops(graph)
    assert_close(got, want)


def test_detach_pass_leaves_a_custom_function_on_inputs_without_grad_inline():
    x = torch.randn(4)
    graph = capture_graph(lambda x: Cube.apply(x) * 2, fakes(x))
    assert "ember.custom_function.default" not in _ops(graph) and not graph.subgraphs
    assert not any(v.requires_grad for v in graph.values.values())


def test_closed_over_tensor_that_requires_grad_is_refused():
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(CaptureError, match="requires grad"):
        capture_graph(lambda x: x * w, fakes(torch.randn(3)))


def test_metadata_mutation_of_an_input_is_refused():
    with pytest.raises(CaptureError, match="metadata mutations"):
        capture_graph(lambda x: x.t_(), fakes(torch.randn(2, 3)))


@pytest.mark.parametrize("fn", [lambda x: x[:, 1:].normal_(), lambda x: x.t().bernoulli_(0.5),
                                lambda x: torch.empty(4, 6)[:, ::2].uniform_() + x[:, :3]])
def test_an_in_place_draw_into_a_tensor_that_is_not_contiguous_is_refused(fn):
    """ATen draws such a tensor in its memory order, the functional graph into a fresh contiguous one: other
    numbers from the same seed."""
    with pytest.raises(CaptureError, match="draws in place into a tensor that is not contiguous"):
        capture_graph(fn, fakes(torch.randn(4, 6)))


def test_an_in_place_draw_into_a_contiguous_tensor_is_captured():
    graph = capture_graph(lambda x: (x[1:].normal_(), torch.empty(3).bernoulli_(0.5)), fakes(torch.randn(4, 6)))
    assert {"aten.normal_functional.default", "aten.bernoulli.p"} <= set(_ops(graph))


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [lambda x: x[1:].add_(x[:-1]), lambda x: x.add_(x[0]),
                                lambda x: x[:1].expand(3, 6).mul_(2),
                                lambda x: torch.neg(x[:-1], out=x[1:]), lambda x: x[:, 1:].add_(x[:, :-1]),
                                lambda x: x.add_(x[:1].expand(4, 6)), lambda x: x.as_strided((3, 3), (1, 1)).mul_(2),
                                lambda x: x[:1].expand(3, 6).fill_(2), lambda x: x[:, :1].expand(4, 2).zero_()])
def test_a_write_eager_refuses_or_computes_in_its_own_order_is_refused(fn, dynamic):
    with pytest.raises(CaptureError, match="overlaps another operand in part|more than once|order it writes"):
        capture_graph(fn, fakes(torch.randn(4, 6), dynamic=dynamic))


def test_a_write_over_itself_or_disjoint_memory_is_captured():
    def f(x):
        x[:1].expand(3, 6).unsqueeze_(0)  # a view op in place writes nothing
        return x.add_(x), x[:2].mul_(x[2:]), x[::2].sub_(x[1::2]), x[:, :3].div_(x[:, 3:])

    graph = capture_graph(f, fakes(torch.randn(4, 6)))
    assert {"aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor", "aten.div.Tensor"} <= set(_ops(graph))


def _writes_over_their_operands():
    """(name, op, args, kwargs, eager raises) of ops that write a tensor another operand of theirs reads."""
    A, i = torch.ops.aten, torch.tensor([2, 0, 3, 1])
    x = torch.randn(4, 4)
    rows = i.view(4, 1).expand(4, 4).contiguous()
    return [
        ("scatter_ of itself", A.scatter_.src, (x, 0, rows, x), {}, True),
        ("scatter_add_ of itself", A.scatter_add_.default, (x, 0, rows, x), {}, True),
        ("index_add_ of itself", A.index_add_.default, (x, 0, i, x), {}, True),
        ("index_put_ of a row", A.index_put_.default, (x, (i[:1],), x[1]), {}, True),
        ("put_ of its first elements", A.put_.default, (x, torch.tensor([3, 1]), x[0, :2]), {}, True),
        ("cat out= of its halves", A.cat.out, ([x[:2], x[2:]],), {"out": x}, True),
        ("gather out= of itself", A.gather.out, (x, 1, rows), {"out": x}, True),
        ("masked_scatter_ of itself", A.masked_scatter_.default, (x, x > 0, x), {}, False),  # reads while it writes
        ("addmm_ of itself", A.addmm_.default, (x, x, x), {}, False),
        ("mm out= of itself", A.mm.out, (x, x), {"out": x}, False),  # no mm_: `self` is a factor, not a start
        ("masked_fill_ of its first element", A.masked_fill_.Tensor, (x, x > 0, x[0, 0]), {}, False),
    ]


@pytest.mark.parametrize("case", _writes_over_their_operands(), ids=[c[0] for c in _writes_over_their_operands()])
def test_an_op_that_is_not_elementwise_writing_memory_it_reads_is_refused(case):
    """Index, scatter, matmul and scan ops read operands while they write: any element they share, the whole
    tensor included, is refused (eager raises for most, and computes the rest in its own order)."""
    from ember_capture._overlap import write_overlap

    name, op, args, kwargs, raises = case
    assert write_overlap(op, args, kwargs) is not None
    if raises:
        with pytest.raises(RuntimeError, match="unsupported operation"):
            op(*args, **kwargs)


def test_an_op_may_read_the_tensor_it_writes_whole_where_eager_reads_it_as_its_start():
    """An elementwise op reads each element before it writes it; an `out=` op whose `self` is the out tensor
    itself and that has an in-place form (`addmm`, `cumsum`, `index_add`) is that in-place op, which starts from
    `self` (torch's chunked linear_cross_entropy accumulates with `addmm(g, a, b, out=g)`). Eager gives the
    functional numbers for each."""
    from ember_capture._overlap import write_overlap

    A, g = torch.ops.aten, torch.Generator().manual_seed(0)
    x, a, b = (torch.randn(4, 4, generator=g) for _ in range(3))
    i, source = torch.tensor([2, 0, 3, 2]), torch.randn(4, 4, generator=g)
    cases = [(A.addcmul_.default, (x, x, x), {}, A.addcmul.default),
             (A.lerp_.Tensor, (x, x, x[:]), {}, A.lerp.Tensor),
             (A.copy_.default, (x, x.view(16).view(4, 4)), {}, lambda t, u: u.clone()),
             (A.addmm.out, (x, a, b), {"out": x}, A.addmm.default),
             (A.cumsum.out, (x, 1), {"out": x}, A.cumsum.default),
             (A.index_add.out, (x, 0, i, source), {"out": x}, A.index_add.default)]
    for op, args, kwargs, functional in cases:
        assert write_overlap(op, args, kwargs) is None, op
        want = functional(*(t.clone() if isinstance(t, torch.Tensor) else t for t in args))
        op(*args, **kwargs)
        torch.testing.assert_close(x, want, msg=str(op))
        x.copy_(torch.randn(4, 4, generator=g))


def test_write_overlap_refuses_what_eager_refuses_and_what_only_eagers_order_computes():
    """Two views of one 48-element storage, as_strided at random (zero strides, gaps, transposes, offsets), and an
    in-place add or copy of one into the other. The predicate says eager raises exactly where eager does; where it
    lets the write through, eager's numbers are the functional ones (every operand read before the write)."""
    from ember_capture._overlap import write_overlap

    rng = torch.Generator().manual_seed(0)

    def pick(n):
        return int(torch.randint(n, (), generator=rng))

    def view(storage, sizes):
        strides = [pick(5) if pick(3) else sizes[-1] ** i for i in range(len(sizes))][::-1]
        span = sum((n - 1) * st for n, st in zip(sizes, strides))
        return storage.as_strided(sizes, strides, pick(48 - span))

    seen = {"raises": 0, "order": 0, "functional": 0}
    for case in range(2000):
        eager = torch.randn(48, generator=rng)
        functional = eager.clone()
        sizes = [1 + pick(3) for _ in range(1 + pick(3))]
        target, other = view(eager, sizes), view(eager, sizes)
        op = [torch.ops.aten.add_.Tensor, torch.ops.aten.copy_.default][case % 2]
        problem = write_overlap(op, (target, other), {})
        new = other.clone() if op is torch.ops.aten.copy_.default else target + other  # read before any write
        try:
            op(target, other)
            raised = False
        except RuntimeError as e:
            assert "unsupported operation" in str(e), e
            raised = True
        layout = (target.shape, target.stride(), target.storage_offset(), other.stride(), other.storage_offset())
        assert raised == (problem is not None and "refuses" in problem or "more than once" in (problem or "")), \
            (op, layout, problem)
        if problem is None:
            where = torch.arange(48).as_strided(*layout[:3]).flatten()  # apart, or written with equal values
            functional[where] = new.flatten()
            torch.testing.assert_close(eager, functional, rtol=0, atol=0, msg=f"{op} {layout}")
        seen["raises" if raised else "order" if problem else "functional"] += 1
    assert min(seen.values()) > 100, seen


def test_an_effectful_op_is_captured_as_a_plain_node_dead_code_elimination_keeps():
    graph = capture_graph(lambda x: torch.linalg.cholesky(x), fakes(torch.randn(3, 3)), input_names=["x"])
    ops = [n.op for n in graph.nodes]
    assert ops == ["aten.linalg_cholesky_ex.default", "aten._linalg_check_errors.default"]
    assert graph.nodes[1].args[1:] == ("linalg.cholesky",)


def _input_gradient(x, w):
    grad, = torch.autograd.grad((torch.tanh(x * w)).sum(), x, create_graph=True)
    return grad * 2


def test_a_backward_with_create_graph_is_refused_only_where_its_result_needs_a_gradient():
    """Its ops read the saved values through autograd's detach: a graph differentiated again would miss their
    paths. Where nothing returned needs a gradient the graph is never differentiated, and is captured."""
    with FakeTensorMode() as mode:
        x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    with pytest.raises(CaptureError, match="create_graph=True"):
        capture_graph(_input_gradient, [x, w.requires_grad_()], fake_mode=mode)
    graph = capture_graph(lambda x, w: _input_gradient(x, w).detach(), [x, w.detach()], fake_mode=mode)
    assert any("tanh" in n.op for n in graph.nodes)


def test_a_refused_replay_leaves_the_functorch_levels_it_entered():
    """Dynamo's graph of `vmap(grad(f))` enters each level with one node and leaves with another; refused in
    between, the replay left the levels entered, and Dynamo's guards then failed on a stack they did not expect."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._functorch._vmap_increment_nesting, (3, "same"))
    graph.call_function(torch.ops.aten.bernoulli_.float, (x, 0.5))  # refused: random, in place, not contiguous
    graph.output(x)
    gm = fx.GraphModule(torch.nn.Module(), graph)
    with FakeTensorMode() as mode:
        strided = torch.randn(4, 4).t()
    with pytest.raises(CaptureError, match="not contiguous"):
        capture_graph(gm, [strided], fake_mode=mode)
    assert torch._C._functorch.peek_interpreter_stack() is None
