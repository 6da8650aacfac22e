"""Graph passes: registered at a named point of the pipeline, chosen by id or by default, run by one runner that
reports each change."""

import pytest
from ember_core import (
    PASS_POINTS,
    Graph,
    PluginError,
    PluginManager,
    hookimpl,
    record_events,
    reset_plugin_manager,
    run_graph_passes,
)
from ember_core.plugins import _plugins as plugins


class Renames:
    """A pass that changes the graph's name (a change the runner sees), and says so in numbers."""

    def __init__(self, id: str, fail: bool = False):
        self.id, self.fail = id, fail

    def run(self, graph: Graph) -> Graph:
        if self.fail:
            raise ValueError("no")
        return graph.replace(name=graph.name + "+" + self.id)

    def summary(self, before: Graph, after: Graph) -> dict[str, int]:
        return {"renamed": int(before.name != after.name)}


class Registers:
    def __init__(self, *passes):
        self.passes = passes

    @hookimpl
    def ember_register(self, registry):
        for pass_, point, priority in self.passes:
            registry.add("pass", pass_.id, pass_, point=point, priority=priority)


@pytest.fixture
def manager(monkeypatch):
    pm = PluginManager(load_entrypoints=False, env={})
    monkeypatch.setattr(plugins, "_manager", pm)
    yield pm
    reset_plugin_manager()


def graph() -> Graph:
    return Graph(name="g")


def test_the_points_are_in_pipeline_order():
    assert PASS_POINTS == ("post_capture", "pre_autograd", "post_partition", "freeze", "pre_lowering")


def test_a_pass_at_an_unknown_point_names_the_plugin_and_the_points(manager):
    with pytest.raises(PluginError, match=r"plugin 'bad': pass 'x' at unknown point 'pre_codegen'; points are "
                                          r"post_capture, pre_autograd"):
        manager.register(Registers((Renames("x"), "pre_codegen", 0)), name="bad")


def test_passes_at_a_point_run_by_priority_or_as_chosen(manager):
    manager.register(Registers((Renames("a"), "freeze", 1), (Renames("b"), "freeze", 5),
                               (Renames("c"), "post_capture", 0)), name="mine")
    assert [p.name for p in manager.registry.passes("freeze")] == ["b", "a"]
    assert [p.name for p in manager.registry.passes("freeze", ["a", "c"])] == ["a"]
    with pytest.raises(PluginError, match="unknown pass point 'later'"):
        manager.registry.passes("later")


def test_the_runner_reports_each_change_and_names_a_failing_pass(manager):
    manager.register(Registers((Renames("a"), "pre_lowering", 0), (Renames("boom", fail=True), "freeze", 0)),
                     name="mine")
    with record_events() as rec:
        out = run_graph_passes(graph(), "pre_lowering")
    assert out.name == "g+a"
    (event,) = rec.kinds("pass_applied")
    assert (event.data["pass"], event.data["point"], event.data["summary"]) == ("a", "pre_lowering", {"renamed": 1})
    with pytest.raises(PluginError, match="pass 'boom' of plugin 'mine' raised ValueError: no"):
        run_graph_passes(graph(), "freeze")
