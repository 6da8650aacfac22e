"""The primals a joint graph is traced with: fake tensors built from the graph's own metadata.

The example inputs only decide two things: which inputs require grad (together with the graph's metadata) and
the value of plain Python scalars. Shapes, strides, dtypes and devices come from the graph's `Value` records, with
its symbols as SymInts, so a graph captured with symbolic sizes gives a joint graph with the same symbols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ember_core import Graph, GraphError, Value, to_dtype
from torch._subclasses.fake_tensor import FakeTensorMode

from ._symbols import SymbolTable


def differentiable_dtype(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def requires_grad(graph: Graph, example_inputs: Sequence[Any]) -> list[bool]:
    """Per input: a floating tensor that the graph's metadata or the example input says requires grad."""
    if len(example_inputs) != len(graph.inputs):
        raise GraphError(f"graph {graph.name!r} takes {len(graph.inputs)} inputs, got {len(example_inputs)} examples")
    wanted = []
    for inp, x in zip(graph.inputs, example_inputs):
        v = graph.values[inp.name]
        flagged = v.requires_grad or (isinstance(x, torch.Tensor) and x.requires_grad)
        wanted.append(v.type == "tensor" and differentiable_dtype(to_dtype(v.dtype)) and flagged)
    return wanted


class FakePrimals:
    """A FakeTensorMode (with a ShapeEnv when the graph has symbols) and one fake primal per graph input."""

    def __init__(self, graph: Graph, example_inputs: Sequence[Any], grads: Sequence[bool]):
        self.symbols = SymbolTable(graph)
        self.mode = FakeTensorMode(shape_env=self.symbols.shape_env, allow_non_fake_inputs=True)
        self.values: list[Any] = []
        for inp, x, grad in zip(graph.inputs, example_inputs, grads):
            self.values.append(self._primal(inp.name, graph.values[inp.name], x, grad))

    def _primal(self, name: str, v: Value, example: Any, grad: bool) -> Any:
        if v.type == "tensor":
            return self._tensor(v).requires_grad_(grad)
        if v.type == "sym":
            if name in self.symbols.symints:
                return self.symbols.symints[name]
            if isinstance(example, torch.SymInt) and isinstance(example.node.hint, int):
                example = example.node.hint  # a frontend's symbolic example: its value when traced
            if not isinstance(example, int):
                raise GraphError(f"symbolic input {name!r} needs an int example, got {type(example).__name__}")
            return self.symbols.add(name, example, size=False)  # not a size of any input: any int
        return example  # a Python scalar or None: traced as the constant it is

    def _tensor(self, v: Value) -> torch.Tensor:
        dim = self.symbols.dim
        shape = [dim(d) for d in v.shape]
        stride = [dim(d) for d in v.stride]
        offset = dim(v.storage_offset)
        dtype, device = to_dtype(v.dtype), torch.device(v.device)
        with self.mode:
            if isinstance(offset, int) and offset == 0:
                return torch.empty_strided(shape, stride, dtype=dtype, device=device)
            extent = offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1
            return torch.empty(extent, dtype=dtype, device=device).as_strided(shape, stride, offset)
