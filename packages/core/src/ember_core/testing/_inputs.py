"""Random inputs for any graph, built from its input values' metadata (sizes from symbol hints)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..graph._dtypes import to_dtype
from ..graph._schema import Graph, Value
from ..graph._symbolic import evaluate


def _tensor(v: Value, sizes: Mapping[str, int], g: torch.Generator) -> torch.Tensor:
    shape = [evaluate(d, sizes) for d in v.shape]
    dtype = to_dtype(v.dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point and not dtype.is_complex:
        return torch.randint(0, 4, shape, generator=g).to(dtype)  # small: safe as indices of most graphs
    return torch.randn(shape, generator=g).to(dtype)


def random_inputs(graph: Graph, sizes: Mapping[str, int] | None = None, seed: int = 0) -> list[Any]:
    """Contiguous random inputs on CPU matching the graph's input values. Symbols take their hints unless `sizes`
    gives them; a `sym` input named after a symbol gets its size. Integer tensors hold values in [0, 4)."""
    bound = {s.name: s.hint for s in graph.symbols} | dict(sizes or {})
    g = torch.Generator().manual_seed(seed)
    inputs: list[Any] = []
    for inp in graph.inputs:
        v = graph.values[inp.name]
        if v.type == "tensor":
            inputs.append(_tensor(v, bound, g))
        elif v.type == "sym":
            inputs.append(bound.get(inp.name, 1))
        else:
            inputs.append(None if v.type == "none" else 1)
    return inputs
