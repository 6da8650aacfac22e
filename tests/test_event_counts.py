"""Each stage reports a graph once: an `ember_event` observer (what EMBER_LOGS is built on) sees every kind at
most once per graph, and exactly once where that stage ran."""

from __future__ import annotations

import re
from collections import Counter

import ember
import ember_runtime
import pytest
import torch
from ember_codegen_cpp import compiler
from ember_core import Graph
from models import MLP

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")

# codegen-cpp's build cache: a hit and a miss are one result
SAME_RESULT = {"build_cache_hit": "build_cache", "build_cache_miss": "build_cache"}
PER_COMPILED_GRAPH = ("graph_compiled", "graph_cache_miss", "kernels_planned", "kernels_generated", "build_cache")
REPEATABLE = {"pass_applied", "fallback", "graph_break", "guards_built", "guard_failed", "recompiled"}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """A build cache of this test's own, and no compiled graph or library kept in memory."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    ember_runtime.clear_cache()


def graph_of(event) -> str | None:
    """The graph an event is about: its graph, its `graph` data, or the `graph 'name'` its message starts with."""
    if isinstance(event.graph, Graph):
        return event.graph.name
    if "graph" in event.data:
        return event.data["graph"]
    found = re.match(r"graph '([^']+)'", event.message)
    return found.group(1) if found else None


def counts(events) -> Counter:
    """(kind, graph) → how many events said it, build-cache hits and misses counted as one kind."""
    return Counter((SAME_RESULT.get(e.kind, e.kind), graph_of(e)) for e in events if e.kind not in REPEATABLE)


def compiled_graphs(events) -> list[str]:
    return [e.graph.name for e in events if e.kind == "graph_compiled"]


def assert_once_per_graph(events, graphs: int) -> None:
    seen = counts(events)
    assert len(compiled_graphs(events)) == graphs
    for name in compiled_graphs(events):
        for kind in PER_COMPILED_GRAPH:
            assert seen[kind, name] == 1, f"{kind} for graph {name!r}: {seen[kind, name]} times; {sorted(seen)}"
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not twice, f"kinds reported more than once for one graph: {twice}"


def pointwise(x):
    return (torch.relu(x) * 2 + x.sin()).sum(1)


def test_inference_reports_each_stage_once_per_graph(frontend):
    compiled = ember.compile(pointwise, options={"frontend": frontend})
    with ember.record_events() as rec:
        compiled(torch.randn(4, 8))
    assert_once_per_graph(rec.events, graphs=1)
    assert [e.kind for e in rec.events].count("graph_captured") == 1


def test_a_second_compile_of_the_same_graph_reports_one_cache_hit_and_no_kernels(frontend):
    x = torch.randn(4, 8)
    ember.compile(pointwise, options={"frontend": frontend})(x)
    torch._dynamo.reset()
    with ember.record_events() as rec:
        ember.compile(pointwise, options={"frontend": frontend})(x)
    kinds = Counter(e.kind for e in rec.events)
    assert kinds["graph_captured"] == 1 and kinds["graph_cache_hit"] == 1
    assert not {"graph_compiled", "kernels_planned", "kernels_generated", "graph_cache_miss"} & set(kinds)


def test_training_reports_each_stage_once_per_graph(frontend):
    model = MLP()
    compiled = ember.compile(model, options={"frontend": frontend})
    with ember.record_events() as rec:
        compiled(torch.randn(4, 16)).sum().backward()
    assert_once_per_graph(rec.events, graphs=2)  # the forward and the backward
    kinds = Counter(e.kind for e in rec.events)
    assert kinds["graph_captured"] == kinds["joint_traced"] == kinds["partitioned"] == 1
    (split,) = [e for e in rec.events if e.kind == "partitioned"]
    assert sorted(compiled_graphs(rec.events)) == sorted([split.payload.forward.name, split.payload.backward.name])
