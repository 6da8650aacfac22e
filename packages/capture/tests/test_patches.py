"""What capture changes in torch while it traces (`_patches.py`)."""

from __future__ import annotations

import inspect

import torch
from ember_capture import _patches
from ember_core import wrapped_by
from torch.fx.experimental.proxy_tensor import make_fx


def scaled_sine(x):
    return torch.sin(x) * 2  # the line the nodes come from


def line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def traced_lines(fn) -> list[str]:
    gm = make_fx(fn, record_stack_traces=True)(torch.randn(3))
    return [n.meta.get("stack_trace") or "" for n in gm.graph.nodes if n.op == "call_function"]


def test_an_anchored_function_keeps_its_frames_where_torch_has_no_anchors(monkeypatch):
    """torch 2.11's make_fx keeps only frames named `forward` and takes no anchors: the graph text of a plain
    function traced by the trace frontend had no `# file:line` comments. There ember wraps the tracer's filter."""
    monkeypatch.delattr(torch.fx.proxy, "_register_stack_trace_anchor", raising=False)
    tracer = torch.fx.proxy.TracerBase
    monkeypatch.setattr(tracer, "_filter_traceback_frames", vars(tracer)["_filter_traceback_frames"])
    monkeypatch.setattr(_patches, "_ANCHORS", set())
    where = f'File "{__file__}", line {line_of(scaled_sine, "the line")}, in scaled_sine'
    assert all(where not in t for t in traced_lines(scaled_sine))  # not named forward: left out
    _patches.anchor_stack_traces(scaled_sine)
    _patches.anchor_stack_traces(scaled_sine)  # again: the filter is wrapped once
    wrapped = vars(tracer)["_filter_traceback_frames"]
    assert "anchored-frames" in wrapped_by(wrapped) and "anchored-frames" not in wrapped_by(wrapped.__wrapped__)
    assert all(where in t for t in traced_lines(scaled_sine))
