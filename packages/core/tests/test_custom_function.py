"""`ember.custom_function`: a call node whose two subgraphs are its forward and its (custom) backward.

The graph is `ember_core.testing.gate_graph()`: `Gate`'s backward is deliberately not the derivative of its
forward, so every gradient check below tells the custom backward from a re-derived one.
"""

import dataclasses

import ember_core as ec
import pytest
import torch
from ember_core import CUSTOM_FUNCTION, GraphError, SchemaError, interpreter_codegen
from ember_core.testing import Gate, gate_graph
from ember_core.testing._custom_function import BACKWARD, FORWARD, gate_reference
from torch.fx.experimental.proxy_tensor import make_fx


@pytest.fixture(scope="module")
def graph():
    return ec.verify(gate_graph())


def inputs(requires_grad=True):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(6, 8, generator=g).requires_grad_(requires_grad),
            torch.randn(8, generator=g).requires_grad_(requires_grad)]


def grads_of(run, xs):
    out, mask = run(xs)
    (out * torch.arange(8.0)).sum().backward()
    return [x.grad for x in xs], out, mask


# ---------------------------------------------------------------------------------------------- the node


def test_call_names_its_two_subgraphs(graph):
    (call,) = [n for n in graph.nodes if n.op == CUSTOM_FUNCTION]
    args = ec.custom_function_arguments(call)
    assert (args["forward"], args["backward"], list(args["non_differentiable"])) == (FORWARD, BACKWARD, [1])
    assert set(graph.subgraphs) == {FORWARD, BACKWARD}
    assert [o.kind for o in graph.subgraphs[FORWARD].outputs] == ["user", "user", "saved", "saved"]
    assert [(o.kind, o.input) for o in graph.subgraphs[BACKWARD].outputs] == [("grad", 0), ("grad", 1)]


def test_the_graph_holds_only_the_models_ops_when_its_subgraphs_are_built_during_the_trace():
    """Building the subgraphs (a trace of their own, on fresh tensors) while the model is being traced must not
    record their tensors' creation in the model's graph (it did when `gate_graph` was the first call in a process)."""
    from ember_core.testing._custom_function import gate_subgraphs

    gate_subgraphs.cache_clear()
    graph = gate_graph(rows=5)
    assert [n.op for n in graph.nodes] == ["aten.sin.default", CUSTOM_FUNCTION, "aten.mul.Tensor", "aten.add.Tensor"]


@pytest.mark.parametrize("run_with", ["interpreter", "interpreter codegen"])
def test_running_the_call_applies_the_custom_backward(graph, run_with):
    run = ec.Interpreter(graph) if run_with == "interpreter" else interpreter_codegen().compile(graph, None, {}).fn
    got, out, mask = grads_of(run, inputs())
    want, ref_out, ref_mask = grads_of(lambda xs: gate_reference(*xs), inputs())
    torch.testing.assert_close(out, ref_out)
    assert out.requires_grad and not mask.requires_grad  # the mask was marked non-differentiable
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_the_reference_backward_is_not_the_derivative():
    """Guards the test above: with autograd's own derivative the gradients would differ."""
    x, w = inputs()
    derived = torch.autograd.grad(((x.sin() * torch.sigmoid(w)) * 2).sum(), [x, w])
    custom = torch.autograd.grad((Gate.apply(x.sin(), w)[0] * 2).sum(), [x, w])
    assert not torch.allclose(derived[0], custom[0]) and not torch.allclose(derived[1], custom[1])


def test_tracing_the_call_records_forward_then_custom_backward_ops(graph):
    """What a joint trace sees: the forward subgraph's ops inline, then the backward subgraph's."""
    def joint(x, w, tangent):
        out, _ = ec.Interpreter(graph).run([x, w])
        return torch.autograd.grad(out, [x, w], tangent)

    x, w = inputs()
    gm = make_fx(joint)(x, w, torch.ones(6, 8))
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "ember.custom_function.default" not in ops
    assert ops.count("aten.sigmoid.default") == 2  # once in the forward subgraph, once in the backward subgraph
    assert "aten.cos.default" in ops  # sin's derivative, reached through the custom gradient of its output


def test_op_outside_its_graph_has_no_kernel():
    with pytest.raises(NotImplementedError):
        torch.ops.ember.custom_function.default([torch.ones(2)], [], FORWARD, BACKWARD, [])


def test_fake_kernel_needs_the_subgraphs_in_scope():
    with pytest.raises(GraphError, match="not in scope"):
        make_fx(lambda x: torch.ops.ember.custom_function.default([x], [], "nowhere", "nowhere", []),
                tracing_mode="fake")(torch.ones(2))


# ---------------------------------------------------------------------------------------------- its forms


def test_json_text_and_fx_round_trips_keep_the_subgraphs(graph, tmp_path):
    assert ec.loads(ec.dumps(graph)) == graph
    assert ec.load(ec.save(graph, tmp_path / "gate.json")) == graph
    assert ec.parse_graph(str(graph)) == graph
    assert ec.from_fx(ec.to_fx(graph)) == graph


def test_text_prints_each_subgraph_indented_after_the_return_line(graph):
    text = str(graph)
    head, _, rest = text.partition(f"\nsubgraph {BACKWARD}:\n")
    assert head.endswith("  return (add, getitem_1)")
    assert rest.startswith("    # ember graph v1.2 from ember_core.testing\n    def Gate_0_backward(")
    assert f"\nsubgraph {FORWARD}:\n" in rest


def test_subgraph_constants_too_large_for_the_text_come_by_prefixed_name(graph):
    big = torch.arange(100.0)
    forward = graph.subgraphs[FORWARD]
    forward = forward.replace(constants={"c": ec.Constant("c", big)})
    g = graph.replace(subgraphs={**graph.subgraphs, FORWARD: forward})
    assert ec.text_constants(g) == {f"{FORWARD}/c": big}
    assert ec.parse_graph(str(g), constants=ec.text_constants(g)) == g
    with pytest.raises(SchemaError, match=f"subgraph {FORWARD}: line .*constant 'c'"):
        ec.parse_graph(str(g))


def _renamed(graph):
    names = {v: f"r_{v}" for v in graph.values}
    return graph.replace(
        name="other",
        inputs=tuple(dataclasses.replace(i, name=names[i.name]) for i in graph.inputs),
        nodes=tuple(ec.rename_reads(n, names).replace(outputs=tuple(names[o] for o in n.outputs))
                    for n in graph.nodes),
        outputs=tuple(dataclasses.replace(o, name=names[o.name]) for o in graph.outputs),
        values={names[k]: v for k, v in graph.values.items()})


def test_fingerprint_sees_the_subgraphs_but_not_their_value_names(graph):
    backward = graph.subgraphs[BACKWARD]
    doubled = backward.replace(nodes=tuple(n.replace(args=(n.args[0], 3)) if n.args[1:] == (2,) else n
                                           for n in backward.nodes))
    renamed = ec.verify(_renamed(backward))
    assert ec.fingerprint(graph.replace(subgraphs={**graph.subgraphs, BACKWARD: renamed})) == ec.fingerprint(graph)
    assert ec.fingerprint(graph.replace(subgraphs={**graph.subgraphs, BACKWARD: doubled})) != ec.fingerprint(graph)


def test_subgraphs_nested_past_the_limit_are_refused():
    from ember_core.graph._json import MAX_SUBGRAPH_DEPTH

    base = g = gate_graph()
    for _ in range(MAX_SUBGRAPH_DEPTH + 1):
        g = base.replace(subgraphs={**base.subgraphs, "deeper": g})
    with pytest.raises(SchemaError, match="nested deeper"):
        ec.loads(ec.dumps(g))
    with pytest.raises(SchemaError, match="nested deeper"):
        ec.parse_graph(str(g))


# ---------------------------------------------------------------------------------------------- verify


def _with_call(graph, **changes):
    nodes = tuple(n.replace(**changes) if n.op == CUSTOM_FUNCTION else n for n in graph.nodes)
    return graph.replace(nodes=nodes)


def _call_args(graph, **changes):
    (call,) = [n for n in graph.nodes if n.op == CUSTOM_FUNCTION]
    args = {**ec.custom_function_arguments(call), **changes}
    return _with_call(graph, args=tuple(args[k] for k in ("tensors", "sizes", "forward", "backward",
                                                          "non_differentiable")))


@pytest.mark.parametrize("change, problem", [
    ({"forward": "missing"}, "names subgraph 'missing'"),
    ({"non_differentiable": (5,)}, "non_differentiable"),
    ({"sizes": (1,)}, "passes 3 inputs to forward subgraph"),
])
def test_verify_names_a_call_that_does_not_fit_its_subgraphs(graph, change, problem):
    with pytest.raises(GraphError, match=problem):
        ec.verify(_call_args(graph, **change))


def test_verify_checks_the_backward_layout(graph):
    backward = graph.subgraphs[BACKWARD]
    wrong = backward.replace(outputs=tuple(dataclasses.replace(o, input=0) for o in backward.outputs))
    with pytest.raises(GraphError, match="one `grad` output per input"):
        ec.verify(graph.replace(subgraphs={**graph.subgraphs, BACKWARD: wrong}))


def test_verify_checks_the_subgraphs_themselves(graph):
    forward = graph.subgraphs[FORWARD]
    broken = forward.replace(outputs=(*forward.outputs[:3], ec.Output("nowhere", "saved")))
    with pytest.raises(GraphError, match="undefined value 'nowhere'"):
        ec.verify(graph.replace(subgraphs={**graph.subgraphs, FORWARD: broken}))
