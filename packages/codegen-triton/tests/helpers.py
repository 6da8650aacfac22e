"""Trace a function to an ATen graph as ember's frontends do, compile it with the Triton codegen, and compare with
eager PyTorch; count the kernels that did not print (each one a `fallback` event)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree
from ember_codegen_triton import TritonCodegen
from ember_core import CompiledGraph, Graph, canonical_symbols, record_events
from ember_core.testing import trace_aten

CODEGEN = TritonCodegen()


def trace(fn: Callable, *args: Any, mode: str = "fake") -> Graph:
    return canonical_symbols(trace_aten(fn, *args, mode=mode))  # s0, s1 ... whatever torch named them


def check(fn: Callable, *args: Any, mode: str = "fake", others=(), fallbacks: int = 0, **tol) -> CompiledGraph:
    """Compile fn once; its outputs equal eager's on args and on each of `others`; exactly `fallbacks` fallback
    events (kernels the printer could not handle)."""
    with record_events() as rec:
        compiled = CODEGEN.compile(trace(fn, *args, mode=mode), list(args), {})
        for inputs in (args, *others):
            want = pytree.tree_leaves(fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in inputs]))
            got = compiled([a.clone() if isinstance(a, torch.Tensor) else a for a in inputs])
            assert len(got) == len(want)
            for k, (g, w) in enumerate(zip(got, want)):
                torch.testing.assert_close(g, w, equal_nan=True, msg=lambda m, k=k: f"output {k}: {m}", **tol)
    reasons = [e.data["reason"] for e in rec.kinds("fallback")]
    assert len(reasons) == fallbacks, reasons
    return compiled


def on_device(graph: Graph, device: str) -> Graph:
    """The graph with its tensors (and the devices its nodes name) on `device`: a graph traced on the CPU, as if for
    `cuda:0` (the machine may have no GPU), or back."""
    values = {n: dataclasses.replace(v, device=device) if v.type == "tensor" else v for n, v in graph.values.items()}
    target = torch.device(device)
    nodes = tuple(dataclasses.replace(n, kwargs={k: target if isinstance(v, torch.device) else v
                                                 for k, v in n.kwargs.items()}) for n in graph.nodes)
    return dataclasses.replace(graph, values=values, nodes=nodes)


def on_cuda(graph: Graph) -> Graph:
    return on_device(graph, "cuda:0")
