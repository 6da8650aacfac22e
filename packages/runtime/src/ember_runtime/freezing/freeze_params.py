"""Pass `freeze-params`: the graph's parameter and buffer inputs become constants holding the call's tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ember_core import Constant, Graph, Output

PASS_ID = "freeze-params"


def _aliased_by_outputs(graph: Graph) -> set[str]:
    """Inputs an output is, views (when known), or is declared an alias of: the frontend hands those out itself. (A
    view of a constant that is an output still shares the parameter's storage, as eager's view does.)"""
    names = {graph.inputs[o.input].name for o in graph.outputs if o.kind == "alias" and o.input is not None}
    for o in graph.outputs:
        names.add(o.name)
        base = graph.values[o.name].base if o.name in graph.values else None
        if base is not None:
            names.add(base)
    return names


def frozen_candidates(graph: Graph) -> list[int]:
    """Indices of the inputs the graph lets become constants: parameters and buffers it does not write or hand out."""
    aliased = _aliased_by_outputs(graph)
    return [k for k, inp in enumerate(graph.inputs)
            if inp.kind in ("param", "buffer") and not inp.mutated and inp.name not in aliased]


def freezable(graph: Graph, inputs: Sequence[Any]) -> list[int]:
    """Indices of the inputs that may become constants: `frozen_candidates` given as real (not fake, not meta)
    tensors."""
    out = []
    for k in frozen_candidates(graph):
        x = inputs[k]
        if not isinstance(x, torch.Tensor) or x.device.type == "meta" or isinstance(
                x, torch._subclasses.fake_tensor.FakeTensor):
            continue
        out.append(k)
    return out


def freeze_params(graph: Graph, inputs: Sequence[Any], which: Sequence[int]) -> Graph:
    """`graph` with inputs `which` (indices) turned into constants of `inputs[k].detach()` (the same storage). The
    other inputs keep their order; mutation and alias outputs are renumbered to match."""
    which = set(which)
    constants = dict(graph.constants)
    values = dict(graph.values)
    renumber: dict[int, int] = {}
    kept = []
    for k, inp in enumerate(graph.inputs):
        if k in which:
            constants[inp.name] = Constant(inp.name, inputs[k].detach())
            del values[inp.name]  # a constant's metadata is its tensor's
        else:
            renumber[k] = len(kept)
            kept.append(inp)
    outputs = tuple(Output(o.name, o.kind, renumber[o.input]) if o.input is not None else o for o in graph.outputs)
    return graph.replace(inputs=tuple(kept), outputs=outputs, constants=constants, values=values)
