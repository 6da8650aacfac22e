"""Moving battery graphs (traced on CPU) and their inputs to another device, for codegens of other devices; telling
an error that lost the process's CUDA context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..graph._schema import Constant, Graph


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


# Factory functions whose result lands on the default device unless `device=` is given.
_FACTORIES = frozenset({
    torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn, torch.randint,
    torch.arange, torch.linspace, torch.eye, torch.tensor, torch.scalar_tensor,
})


class DeviceAudit(torch.overrides.TorchFunctionMode):
    """Records every factory call that names no device (its tensor would land on whatever the default device is,
    the CPU in a test, a wrong device on a GPU). Triton's interpreter runs CPU tensors and the CPU is the default,
    so such a call cannot fail in a CPU test: this is what sees it. `calls` lists `name(shape)` of each."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FACTORIES and kwargs.get("device") is None:
            self.calls.append(f"{func.__name__}{tuple(args[:1])}")
        return func(*args, **kwargs)

    def check(self, where: str) -> None:
        assert not self.calls, (f"{where}: {len(self.calls)} allocation(s) named no device, so they land on the "
                                f"default device whatever the graph's device is: {', '.join(self.calls[:5])}")


# what CUDA says of the errors that stay with a context: every later CUDA call of the process fails with them too
STICKY_CUDA_ERRORS = ("illegal memory access", "unspecified launch failure", "misaligned address",
                      "illegal instruction", "device-side assert")


def cuda_context_lost(error: BaseException | None) -> bool:
    """Does `error`, or one it was raised from, say that its process's CUDA context is lost (a sticky error: the
    process must end for CUDA to work again)?"""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if "CUDA" in text and any(s in text for s in STICKY_CUDA_ERRORS):
            return True
        error = error.__cause__ or error.__context__
    return False
