"""The in-process cache of compiled graphs holds a graph while something uses it, plus a few recent ones."""

from __future__ import annotations

import gc
import weakref

import torch
from ember_core import from_fx
from ember_runtime import Pipeline, clear_cache, record_events
from ember_runtime._graph_cache import RECENT
from torch.fx.experimental.proxy_tensor import make_fx

X = torch.randn(4)


def graph(k: float):
    """A graph whose fingerprint is new for each k."""
    return from_fx(make_fx(lambda x: (x * k,))(X), name=f"times_{k}")


def pipeline() -> Pipeline:
    return Pipeline.from_options({"codegen.cpu": "interpreter"}, fullgraph=False, dynamic=None, mode=None)


def test_compiling_and_dropping_200_graphs_keeps_at_most_the_bound_alive():
    clear_cache()
    p = pipeline()
    alive = []
    for k in range(200):
        compiled = p.codegen_graph(graph(k + 0.5), [X])
        alive.append(weakref.ref(compiled))
        del compiled
    gc.collect()
    assert sum(r() is not None for r in alive) <= RECENT


def test_a_graph_in_use_is_still_a_hit_after_many_others():
    clear_cache()
    p = pipeline()
    kept = p.codegen_graph(graph(1000.25), [X])
    for k in range(RECENT + 20):
        p.codegen_graph(graph(k + 0.75), [X])
    gc.collect()
    with record_events() as rec:
        again = p.codegen_graph(graph(1000.25), [X])
    assert again is kept and len(rec.kinds("graph_cache_hit")) == 1
    torch.testing.assert_close(again([X])[0], X * 1000.25)


def test_a_recent_graph_nobody_holds_is_still_a_hit():
    clear_cache()
    p = pipeline()
    p.codegen_graph(graph(2000.5), [X])
    gc.collect()
    with record_events() as rec:
        p.codegen_graph(graph(2000.5), [X])
    assert len(rec.kinds("graph_cache_hit")) == 1
