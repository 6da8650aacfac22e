"""Automatic dynamic shapes compile as often as torch.compile, with ember's caches in the way: a decode loop with a
growing KV cache (two graphs from a 4-token prefill; one with `dynamic=True`) and a batch-size sweep 1..64 (two
graphs). Each program checks every output against eager (`_warm_programs.py`, which a fresh process also runs
on a warm cache in test_disk_cache.py). Both frontends: Dynamo counts as torch.compile does by construction;
the trace frontend must count the same."""

from __future__ import annotations

import pytest
from _warm_programs import decode, sweep
from conftest import assert_same_value_and_grad


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


INDEXED_VIEWS = {
    "select": lambda x, k: x.select(1, k) * 2,
    "first_dim": lambda x, k: x[k] * 2,
    "start": lambda x, k: x[:, k:] * 2,
    "window": lambda x, k: x[:, k - 1:k + 1] * 2,
    "flat": lambda x, k: x.reshape(20)[k] * 2,
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(INDEXED_VIEWS))
def test_an_int_index_that_turns_negative_counts_from_the_end(name, dynamic):
    """An int index that changes between calls is a symbol of the graph (automatic dynamic, or dynamic=True); once
    it is negative Dynamo makes a graph for negative values (its guard: `k <= -1`), and the view's offset is
    `k + size`. Lowering read the index as it was, so `x[-1]` loaded x[-1 * stride], outside the row it selects:
    silently wrong numbers (select, x[k], x[:, k:]; found by `python -m tests.opinfo run --dynamic`). The symbol's
    range says its sign (lowering counts a negative index from the end); the joint trace took it for a size and
    refused the negative value."""
    import ember
    import torch

    fn = INDEXED_VIEWS[name]
    compiled = ember.compile(fn, dynamic=dynamic)
    with ember.record_events() as rec:
        for k in (2, 1, -1, -2, 0, 3, -3):
            assert_same_value_and_grad(fn, compiled, torch.randn(4, 5), k, where=f"k={k}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]


def test_causal_attention_of_symbolic_head_size_compiles_its_graph():
    """With every size symbolic SDPA's math path scales q and k by `(1 / sqrt(d)) ** 0.5`, a fourth root of the
    head size that lowering had no float form of: the graph ran in the interpreter codegen. Forward and backward
    match eager at two lengths, and nothing falls back."""
    import ember
    import torch
    import torch.nn.functional as F

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = ember.compile(attend, dynamic=True)
    with ember.record_events() as rec:
        for lq, lk, d in ((3, 6, 8), (5, 7, 16)):
            inputs = [torch.randn(4, n, d) for n in (lq, lk, lk)]
            eager_in = [t.clone().requires_grad_() for t in inputs]
            ember_in = [t.clone().requires_grad_() for t in inputs]
            eager, out = attend(*eager_in), compiled(*ember_in)
            weights = torch.randn(out.shape)
            torch.testing.assert_close((out, *torch.autograd.grad((out * weights).sum(), ember_in)),
                                       (eager, *torch.autograd.grad((eager * weights).sum(), eager_in)))
    assert not [e.message for e in rec.events if e.kind == "fallback"]


@pytest.mark.parametrize("mode, scale", [("nearest", 0.5), ("nearest", 0.29), ("bilinear", 1.7),
                                         ("bicubic", (0.3, 2.5))])
def test_a_fractional_interpolate_scale_compiles_with_symbolic_sizes(frontend, mode, scale):
    """`F.interpolate(x, scale_factor=0.5)` of a symbolic size has the size `TruncToInt(0.5*ToFloat(s0))`, a double
    rounded toward zero: the schema's grammar had no float, so the graph ran eagerly. The size is computed in
    double precision as Python computes it (0.29 * 100 is 28.999999999999996: 28 rows, not the 29 of exact
    arithmetic; 0.3 * 10 is 3.0000000000000004). Forward and backward match eager at each size, nothing falls
    back."""
    import ember
    import torch
    import torch.nn.functional as F

    def resize(x):
        return F.interpolate(x, scale_factor=scale, mode=mode)

    compiled = ember.compile(resize, dynamic=True, options={"frontend": frontend})
    with ember.record_events() as rec:
        for size in ((100, 10), (37, 14), (64, 9)):
            x = torch.randn(2, 3, *size)
            assert_same_value_and_grad(resize, compiled, x, where=f"size={size}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]


@pytest.mark.parametrize("rounding, scale", [("floor", 0.29), ("ceil", 0.07)])
def test_a_size_rounded_down_or_up_from_a_float_compiles(frontend, rounding, scale):
    """`x[:math.floor(n * 0.29)]` sizes a slice `FloorToInt(0.29*ToFloat(s0))` (ceil: `CeilToInt`): the printers had
    no spelling of either, and the graph ran in the interpreter codegen. Equal to eager, forward and backward, at
    sizes where doubles and exact arithmetic part (0.29 * 100 is 28.999999999999996: 28 rows; 0.07 * 100 is
    7.000000000000001: 8 rows). The trace frontend compiles it with no fallback. Under Dynamo the first graph of a
    process may carry the size as a symbol of its own (`s2`, or in the joint trace an unbacked `u1`) that no
    input's shape binds, and run in the interpreter codegen: visible, equal to eager, not yet compiled."""
    import math

    import ember
    import torch

    round_ = getattr(math, rounding)

    def head(x):
        return x[:round_(x.shape[0] * scale)] * 3

    compiled = ember.compile(head, dynamic=True, options={"frontend": frontend})
    with ember.record_events() as rec:
        for n in (100, 37, 10):
            assert_same_value_and_grad(head, compiled, torch.randn(n, 3), where=f"n={n}")
    fallbacks = [e.message for e in rec.events if e.kind == "fallback"]
    assert not fallbacks if frontend == "trace" else all("appear in no input's shape" in m for m in fallbacks)


@pytest.mark.parametrize("size", ["ceil", "trunc", "floor"])
def test_a_size_rounded_from_a_true_division_is_eagers(frontend, size):
    """`x[:math.ceil(n / 2)]` is `CeilToInt(IntTrueDiv(s0, 2))`; the printers spelled IntTrueDiv as a floor division
    (right under a floor only), so the slice had n // 2 rows where eager has ceil(n / 2): silently one row short at
    odd n (2c080ad, found before the session ended). Inside a rounding a true division is now a double division,
    as Python's `n / 2`; forward and backward equal eager, nothing falls back."""
    import math

    import ember
    import torch

    round_ = {"ceil": math.ceil, "trunc": int, "floor": math.floor}[size]

    def head(x):
        return x[:round_(x.shape[0] / 2)] * 2

    compiled = ember.compile(head, dynamic=True, options={"frontend": frontend})
    with ember.record_events() as rec:
        for n in (7, 10, 13):
            assert_same_value_and_grad(head, compiled, torch.randn(n, 3), where=f"n={n}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]
