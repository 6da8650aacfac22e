"""mode="max-autotune": each kernel's configuration is measured once, stored on disk, reused by a new codegen."""

from __future__ import annotations

import json

import torch
from ember_codegen_triton import TritonCodegen
from ember_codegen_triton._autotune import TUNER, configs
from ember_core import record_events
from helpers import trace

TUNE = {"mode": "max-autotune"}


def fn(x):
    return (torch.softmax(x, -1) * 2, x.exp() + 1)


def test_tuned_kernels_match_eager_and_store_their_choice():
    x = torch.randn(6, 40)
    graph = trace(fn, x)
    with record_events() as rec:
        compiled = TritonCodegen().compile(graph, [x], TUNE)
        out = compiled([x])
    assert not rec.kinds("fallback")
    for got, want in zip(out, fn(x)):
        torch.testing.assert_close(got, want)
    assert "_tune_ember_k" in compiled.source
    keys = [e.data["key"] for e in rec.kinds("kernel_tuned")]  # this test's kernels (the cache holds others')
    stored = [json.loads((TUNER.cache.directory / f"{key}.choice").read_text()) for key in keys]
    assert stored and all(isinstance(s, list) and len(s) == 2 for s in stored)


def test_a_stored_choice_is_reused_and_a_bad_one_ignored(monkeypatch):
    from ember_codegen_triton import _autotune

    x = torch.randn(5, 24)
    graph = trace(lambda x: (torch.softmax(x, -1),), x)
    TritonCodegen().compile(graph, [x], TUNE)([x])
    timed = []
    monkeypatch.setattr(_autotune.TUNER, "_time", lambda *a: timed.append(1) or 1.0)
    out = TritonCodegen().compile(graph, [x], TUNE)([x])[0]  # a new codegen: the choice comes from disk
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert timed == []
    for path in TUNER.cache.directory.glob("*.choice"):  # a choice no kernel could have made: tuned again, not trusted
        path.write_text(json.dumps({"xblock": 3, "warps": "__import__('os')"}))
    out = TritonCodegen().compile(graph, [x], TUNE)([x])[0]
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert timed


def test_a_kernel_that_updates_a_buffer_in_place_runs_once_on_it():
    x = torch.randn(4, 16)
    graph = trace(lambda x: (x.add_(1),), x.clone())
    y = x.clone()
    TritonCodegen().compile(graph, [y], TUNE)([y])
    torch.testing.assert_close(y, x + 1)


def test_configurations_start_with_the_heuristics_choice():
    from ember_codegen_triton import TritonKernel

    k = TritonKernel("k", (), frozenset(), "", xblock=64, rblock=32, warps=4)
    assert configs(k)[0] == (64, 4) and len(set(configs(k))) == len(configs(k))
