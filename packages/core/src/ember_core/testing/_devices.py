"""Moving battery graphs (traced on CPU) and their inputs to another device, for codegens of other devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .._schema import Constant, Graph


def _arg_to_device(arg: Any, device: torch.device) -> Any:
    if isinstance(arg, torch.device):
        return device
    if isinstance(arg, tuple):
        return tuple(_arg_to_device(a, device) for a in arg)
    return arg


def graph_to_device(graph: Graph, device: str) -> Graph:
    """The graph with every value, constant and `device=` argument on `device` (the graph itself if already there)."""
    if all(v.device == device for v in graph.values.values() if v.type == "tensor"):
        return graph
    dev = torch.device(device)
    return graph.replace(
        values={k: v.replace(device=device) if v.type == "tensor" else v for k, v in graph.values.items()},
        constants={k: Constant(k, c.tensor.to(dev)) for k, c in graph.constants.items()},
        nodes=tuple(
            n.replace(args=_arg_to_device(n.args, dev), kwargs={k: _arg_to_device(v, dev) for k, v in n.kwargs.items()})
            for n in graph.nodes
        ),
    )


def inputs_to_device(inputs: Sequence[Any], device: str) -> list:
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
