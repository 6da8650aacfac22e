"""Custom autograd functions in captured graphs: one `ember.custom_function` call with its two subgraphs, through both
frontends. The graphs run in ember-core's interpreter (the `compile_graph` fixture), whose eager autograd applies
the call's backward subgraph, so each gradient below is the one the captured graph itself gives."""

from __future__ import annotations

import pytest
import torch
from ember_capture import CaptureError, DynamoFrontend, TraceFrontend, capture_graph
from ember_core import CUSTOM_FUNCTION, custom_function_arguments
from torch.autograd.function import Function
from torch.testing import assert_close

FRONTENDS = {"dynamo": DynamoFrontend, "trace": TraceFrontend}


@pytest.fixture(params=sorted(FRONTENDS))
def frontend(request):
    return FRONTENDS[request.param]()


class TimesThree(torch.autograd.Function):
    """Forward doubles, backward triples: only the custom backward gives 3."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


class MulSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x


def calls(graph):
    return [n for n in graph.nodes if n.op == CUSTOM_FUNCTION]


def run_backward(fn, frontend, compile_graph, *inputs):
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    frontend.wrap(fn, compile_graph, {})(*inputs).sum().backward()
    return [x.grad for x in inputs]


def test_a_call_that_needs_a_gradient_is_one_node_with_its_subgraphs(frontend, compile_graph):
    x = torch.zeros(3, requires_grad=True)
    (grad,) = run_backward(lambda x: TimesThree.apply(x.exp()), frontend, compile_graph, x)
    assert_close(grad, torch.full((3,), 3.0))  # exp'(0) = 1, times the custom 3
    (graph,) = compile_graph.graphs
    (call,) = calls(graph)
    args = custom_function_arguments(call)
    assert (args["forward"], args["backward"]) == ("TimesThree_0_forward", "TimesThree_0_backward")
    assert sorted(graph.subgraphs) == ["TimesThree_0_backward", "TimesThree_0_forward"]
    assert graph.values[call.outputs[0]].requires_grad


def test_saved_values_are_forward_outputs_and_backward_inputs(frontend, compile_graph):
    x, y = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    gx, gy = run_backward(lambda x, y: MulSaved.apply(x, y + 1), frontend, compile_graph, x, y)
    assert_close(gx, y + 1)
    assert_close(gy, x)
    (graph,) = compile_graph.graphs
    forward, backward = graph.subgraphs["MulSaved_0_forward"], graph.subgraphs["MulSaved_0_backward"]
    assert [o.kind for o in forward.outputs] == ["user", "saved", "saved"]
    assert [i.kind for i in backward.inputs] == ["tangent", "saved", "saved"]
    assert [(o.kind, o.input) for o in backward.outputs] == [("grad", 0), ("grad", 1)]


def test_two_calls_get_two_pairs_of_subgraphs(frontend, compile_graph):
    x = torch.randn(3, requires_grad=True)
    run_backward(lambda x: TimesThree.apply(TimesThree.apply(x)), frontend, compile_graph, x)
    (graph,) = compile_graph.graphs
    assert len(calls(graph)) == 2 and len(graph.subgraphs) == 4


def test_a_call_that_needs_no_gradient_runs_inline(frontend, compile_graph):
    out = frontend.wrap(lambda x: TimesThree.apply(x) + 1, compile_graph, {})(torch.ones(3))
    assert_close(out, torch.full((3,), 3.0))
    (graph,) = compile_graph.graphs
    assert not calls(graph) and not graph.subgraphs


def test_a_call_whose_result_is_unused_leaves_no_subgraphs():
    from torch._subclasses.fake_tensor import FakeTensorMode

    def f(x):
        TimesThree.apply(x)
        return x * 2

    with FakeTensorMode() as mode:
        x = torch.empty(3, requires_grad=True)
    graph = capture_graph(f, [x], fake_mode=mode)
    assert not calls(graph) and graph.subgraphs == {}


def test_backward_with_the_wrong_number_of_gradients_runs_eagerly_and_fails_as_eager(compile_graph, events):
    """(Dynamo itself fails to trace this function in torch 2.13; the trace frontend hands it to eager.)"""

    class TooFew(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, grad):
            return (grad,)

    fn = TraceFrontend().wrap(lambda x, y: TooFew.apply(x, y), compile_graph, {})
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        fn(torch.randn(2, requires_grad=True), torch.randn(2)).sum().backward()
    wanted = "TooFew: backward returned an incorrect number of gradients (expected 2, got 1)"
    assert any(wanted in e.message for e in events.of("fallback"))


def test_forward_that_reads_a_tensor_it_was_not_given_runs_eagerly_in_the_trace_frontend(compile_graph, events):
    """Dynamo lifts such a tensor into an argument; ember's own tracer would bake it in as a constant, which it
    refuses for a tensor that requires grad, so the function runs eagerly."""
    w = torch.nn.Parameter(torch.randn(3))

    class ReadsW(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * w

        @staticmethod
        def backward(ctx, grad):
            return grad * 5

    x = torch.randn(3, requires_grad=True)
    TraceFrontend().wrap(lambda x: ReadsW.apply(x), compile_graph, {})(x).sum().backward()
    assert_close(x.grad, torch.full((3,), 5.0))
    assert any("ReadsW cannot be captured: the function reads a tensor that requires grad" in e.message
               for e in events.of("fallback"))


def test_tensor_passed_inside_a_list_runs_eagerly_in_the_trace_frontend(compile_graph, events):
    """Only top-level tensors are the call's operands; one inside a list would be baked into the forward subgraph
    as a constant with no data (a fake tensor of the enclosing trace): refused, so the function runs eagerly."""
    class ListArg(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xs, y):
            return xs[0] * y

        @staticmethod
        def backward(ctx, grad):
            return None, grad * 7

    y = torch.randn(3, requires_grad=True)
    TraceFrontend().wrap(lambda x, y: ListArg.apply([x], y), compile_graph, {})(torch.randn(3), y).sum().backward()
    assert_close(y.grad, torch.full((3,), 7.0))
    assert any("ListArg cannot be captured: the function reads a tensor of the traced program" in e.message
               for e in events.of("fallback"))


def test_function_apply_is_the_original_outside_a_capture(compile_graph):
    original = Function.__dict__["apply"]
    TraceFrontend().wrap(lambda x: TimesThree.apply(x), compile_graph, {})(torch.ones(2, requires_grad=True))
    assert Function.__dict__["apply"] is original


def test_dynamo_function_name_comes_from_its_source_line():
    from ember_capture._custom_functions import function_name

    class Node:
        meta = {"stack_trace": '  File "m.py", line 3, in f\n    return Swish.apply(x) + 1\n           ^^^^^\n'}

    assert function_name(Node()) == "Swish"
    Node.meta = {}
    assert function_name(Node()) == "function"


def test_a_non_tensor_output_runs_eagerly_with_its_gradient(frontend, compile_graph, events):
    class ReturnsInt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 3

        @staticmethod
        def backward(ctx, grad, _):
            return grad

    x = torch.randn(2, requires_grad=True)
    out, n = frontend.wrap(lambda x: ReturnsInt.apply(x), compile_graph, {})(x)
    out.sum().backward()
    assert n == 3
    assert_close(x.grad, torch.ones(2))
    if isinstance(frontend, TraceFrontend):  # Dynamo keeps the int out of the graph itself
        assert any("ReturnsInt returns a value that is not a tensor" in e.message for e in events.of("fallback"))


def test_direct_capture_raises_for_mark_dirty():
    from torch._subclasses.fake_tensor import FakeTensorMode

    class Dirty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x.mul_(2)

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    with FakeTensorMode() as mode:
        x = torch.empty(3, requires_grad=True)
    with pytest.raises(CaptureError, match="Dirty writes its input in place"):
        capture_graph(lambda x: Dirty.apply(x * 1), [x], fake_mode=mode)
