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
