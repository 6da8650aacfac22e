"""Lowering's graph passes are graph passes like a plugin's: registered at `pre_lowering`, run by the one runner,
chosen by the `passes` option's ids."""

import torch
from ember_core import get_plugin_manager, record_events
from ember_lowering import lower
from lowering_checks import trace

X, W = torch.randn(6, 8), torch.randn(8, 5)


def test_lowerings_graph_passes_are_registered_at_pre_lowering_in_order():
    passes = get_plugin_manager().registry.passes("pre_lowering")
    assert [(p.name, p.plugin) for p in passes] == [
        ("fold-scatter-adds", "lowering"), ("index-add-rows", "lowering"), ("cat-slice-scatters", "lowering"),
        ("cat-matmul-sums", "lowering"), ("drop-dead-clones", "lowering")]


def test_lower_runs_them_and_reports_each_change():
    graph = trace(lambda x, w: (x @ w).clone() @ w.t(), X, W)
    with record_events() as rec:
        plan = lower(graph)
    applied = [(e.data["pass"], e.data["point"]) for e in rec.kinds("pass_applied")]
    assert applied == [("drop-dead-clones", "pre_lowering")]
    assert "clone" not in str(plan)


def test_the_passes_option_chooses_them_by_id():
    graph = trace(lambda x, w: (x @ w).clone() @ w.t(), X, W)
    with record_events() as rec:
        plan = lower(graph, graph_passes=["fold-scatter-adds"])
    assert not rec.kinds("pass_applied") and "clone" in str(plan)
