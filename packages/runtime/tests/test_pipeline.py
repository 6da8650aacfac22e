from __future__ import annotations

import torch
from ember_core import Graph, get_plugin_manager, graph_device, hookimpl
from ember_runtime import clear_cache, compile, record_events


class CountingPass:
    id = "count"

    def __init__(self) -> None:
        self.seen: list[Graph] = []

    def run(self, graph: Graph) -> Graph:
        self.seen.append(graph)
        return graph.replace(name=graph.name + "_counted")


class PassPlugin:
    def __init__(self) -> None:
        self.pass_ = CountingPass()

    @hookimpl
    def ember_register(self, registry):
        registry.add("pass", "count", self.pass_, point="post_capture")


def f(x):
    return x.cos() + 1


def test_registered_pass_runs_after_capture(toy):
    plugin = PassPlugin()
    get_plugin_manager().register(plugin, name="count-pass")
    clear_cache()
    with record_events() as rec:
        compile(f, options={"frontend": "toy"})(torch.randn(3))
    assert len(plugin.pass_.seen) == 1
    assert [e.graph.name for e in rec.kinds("pass_applied")] == ["f_counted"]


def test_passes_option_selects_no_pass(toy):
    plugin = PassPlugin()
    get_plugin_manager().register(plugin, name="count-pass")
    compile(f, options={"frontend": "toy", "passes": []})(torch.randn(3))
    assert plugin.pass_.seen == []


def test_graph_device_is_the_first_tensor_inputs(toy):
    compile(f, options={"frontend": "toy"})(torch.randn(3))
    assert graph_device(toy.frontend.graphs[-1]) == "cpu"


def test_a_negated_view_input_runs_its_graph_in_the_interpreter_with_its_sign(toy):
    """The toy frontend compiles per call, without guards: the runtime itself must see the bit."""
    negated = torch.randn(3, dtype=torch.complex64).conj().imag
    with record_events() as rec:
        out = compile(f, options={"frontend": "toy"})(negated)
    torch.testing.assert_close(out, f(negated))
    assert [e.data["cause"] for e in rec.kinds("fallback")] == ["input"]
    assert "interpreter" in rec.kinds("graph_compiled")[0].message
