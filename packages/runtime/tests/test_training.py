"""Training assembly: autograd → partition → codegen, found through the registry; eager autograd without them."""

from __future__ import annotations

import torch
from ember_core import GraphCompiled, JointGraph, JointTraced, Partition, Partitioned, get_plugin_manager, hookimpl
from ember_runtime import compile, record_events


def f(x, w):
    return (x @ w).tanh()


def test_without_autograd_plugins_training_runs_the_forward_graph_under_eager_autograd(toy):
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    compile(f, options={"frontend": "toy"})(x, w).sum().backward()
    w_ref = w.detach().clone().requires_grad_()
    f(x, w_ref).sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad)


class StubStages:
    """Records the order the runtime calls the training stages in; the 'joint' is the forward graph itself."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def joint(self, graph, example_inputs):
        self.calls.append("joint")
        return JointGraph(graph, len(graph.inputs), len(graph.outputs))

    def partition(self, joint, options):
        self.calls.append("partition")
        return Partition(joint.graph, joint.graph, saved=())

    def wrap(self, partition, forward, compile_backward):
        self.calls.append("wrap")
        self.compile_backward = compile_backward
        return forward

    @hookimpl
    def ember_register(self, registry):
        registry.add("autograd", "stub", self)
        registry.add("partition", "stub", self)


def test_training_goes_through_autograd_then_partition_then_codegen(toy):
    stages = StubStages()
    get_plugin_manager().register(stages, name="stub-stages")
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    with record_events() as rec:
        compile(f, options={"frontend": "toy", "cache": False, "autograd": "stub", "partition": "stub"})(x, w)
    assert stages.calls == ["joint", "partition", "wrap"]
    assert [e.kind for e in rec.events if e.kind in ("joint_traced", "partitioned", "graph_compiled")] == [
        "joint_traced", "partitioned", "graph_compiled"]
    with record_events() as rec:
        stages.compile_backward()
    assert [e.kind for e in rec.events if e.stage in ("autograd", "partition", "codegen")] == ["graph_compiled"]


def test_training_events_carry_typed_payloads(toy):
    stages = StubStages()
    get_plugin_manager().register(stages, name="stub-stages")
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    with record_events() as rec:
        compile(f, options={"frontend": "toy", "cache": False, "autograd": "stub", "partition": "stub"})(x, w)
    (traced,), (split,), (compiled,) = rec.kinds("joint_traced"), rec.kinds("partitioned"), rec.kinds("graph_compiled")
    assert isinstance(traced.payload, JointTraced) and traced.payload.autograd == "stub"
    assert traced.graph is traced.payload.joint.graph and traced.payload.graph.name == traced.graph.name
    assert isinstance(split.payload, Partitioned) and split.payload.partitioner == "stub"
    assert split.payload.joint is traced.payload.joint and split.graph is split.payload.forward
    assert split.get("saved") == () and set(split.data) == {"seconds"}
    assert isinstance(compiled.payload, GraphCompiled) and compiled.payload.compiled.graph is compiled.graph
    for timed in (traced, split, compiled):  # the runtime times the stages it runs
        assert isinstance(timed.data["seconds"], float) and timed.data["seconds"] >= 0


def test_inference_skips_the_training_stages(toy):
    stages = StubStages()
    get_plugin_manager().register(stages, name="stub-stages")
    with torch.no_grad():
        compile(f, options={"frontend": "toy"})(torch.randn(3, 4), torch.randn(4, 2, requires_grad=True))
    assert stages.calls == []


def test_autograd_eager_option_skips_the_training_stages(toy):
    stages = StubStages()
    get_plugin_manager().register(stages, name="stub-stages")
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    out = compile(f, options={"frontend": "toy", "autograd": "eager"})(x, w)
    assert stages.calls == []
    assert out.requires_grad  # the graph ran where eager autograd records it
