"""Graph passes at every point of the pipeline, built-ins and a plugin's alike: registered at a point, listed in
order, chosen by the `passes` option, each change reported with its point."""

from __future__ import annotations

import ember
import pytest
import torch
from ember_core import PASS_POINTS, get_plugin_manager, hookimpl, record_events, reset_plugin_manager


class Marks:
    """Renames the graph (a change the runner reports) at its point."""

    def __init__(self, point: str):
        self.id, self.point = f"mark-{point.replace('_', '-')}", point

    def run(self, graph):
        return graph.replace(name=graph.name + "_" + self.id.replace("-", "_"))


class Plugin:
    @hookimpl
    def ember_register(self, registry):
        for point in PASS_POINTS:
            registry.add("pass", Marks(point).id, Marks(point), point=point, default=False)


@pytest.fixture
def marks():
    reset_plugin_manager()
    get_plugin_manager().register(Plugin(), name="marks")
    yield [Marks(p).id for p in PASS_POINTS]
    reset_plugin_manager()


def test_the_built_in_graph_passes_are_registered_at_their_points():
    registry = get_plugin_manager().registry
    assert [p.name for p in registry.passes("pre_lowering")][:5] == ["fold-scatter-adds", "index-add-rows",
                                                                 "cat-slice-scatters", "cat-matmul-sums",
                                                                 "drop-dead-clones"]
    assert [p.name for p in registry.passes("freeze")] == ["fold-constants", "fold-batch-norm", "prepack-weights",
                                                           "drop-dead"]


def test_a_training_graph_passes_every_point_but_freeze(marks):
    model = torch.nn.Linear(4, 3)
    compiled = ember.compile(model, options={"passes": marks, "cache": False})
    with record_events() as rec:
        compiled(torch.randn(2, 4)).sum().backward()
    points = [e.data["point"] for e in rec.kinds("pass_applied")]
    assert points == ["post_capture", "pre_autograd", "post_partition", "post_partition", "pre_lowering",
                      "pre_lowering"]


def test_a_frozen_inference_graph_passes_freeze(marks):
    model = torch.nn.Linear(4, 3).eval()
    compiled = ember.compile(model, options={"passes": marks, "cache": False, "freezing": True})
    with torch.no_grad(), record_events() as rec:
        compiled(torch.randn(2, 4))
    points = [e.data["point"] for e in rec.kinds("pass_applied")]
    assert points == ["post_capture", "freeze", "pre_lowering"]
