"""Automatic dynamic shapes compile as often as torch.compile, with ember's caches in the way: a decode loop with a
growing KV cache (two graphs from a 4-token prefill; one with `dynamic=True`) and a batch-size sweep 1..64 (two
graphs). Each program checks every output against eager (`_warm_programs.py`, which a fresh process also runs
on a warm cache in test_disk_cache.py). Both frontends: Dynamo counts as torch.compile does by construction;
the trace frontend must count the same."""

from __future__ import annotations

import pytest
from _warm_programs import decode, sweep


def compiled(result: dict) -> int:
    return result["events"].get("graph_captured/capture", 0)


@pytest.mark.parametrize("dynamic, graphs", [(None, 2), (True, 1)])
def test_a_decode_loop_compiles_as_often_as_torch_compile(frontend, dynamic, graphs):
    result = decode(frontend, dynamic=dynamic)
    assert compiled(result) == result["torch_graphs"] == graphs
    assert not result["events"].get("fallback/capture") and not result["events"].get("fallback/codegen-cpp")


def test_a_batch_size_sweep_compiles_as_often_as_torch_compile(frontend):
    result = sweep(frontend)
    assert compiled(result) == result["torch_graphs"] == 2


def test_the_decode_loop_reuses_its_symbolic_graph_from_the_in_process_cache_after_a_reset(frontend):
    decode(frontend, dynamic=True)
    again = decode(frontend, dynamic=True)
    assert compiled(again) == 1 and again["events"].get("graph_cache_hit/runtime") == 1
