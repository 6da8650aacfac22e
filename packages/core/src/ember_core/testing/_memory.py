"""What a training step's autograd graph keeps between the forward and the backward, in bytes: the measure that
activation checkpointing (and a partitioner's choice of saved values) is about. Eager's autograd and a compiled
function's `autograd.Function` both hand what they keep to `torch.autograd.graph.saved_tensors_hooks`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def kept_for_backward(forward: Callable[[], torch.Tensor], leave_out: Iterable[torch.Tensor] = ()) -> int:
    """Run `forward()` (it returns a loss), then its backward, and return the bytes of the distinct storages the
    autograd graph kept for that backward, those of `leave_out` (inputs, parameters: the caller holds them anyway)
    not counted. A storage kept twice (two views of it) counts once."""
    mine = {t.untyped_storage().data_ptr() for t in leave_out}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in mine:
            kept[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    loss.backward()
    return sum(kept.values())
