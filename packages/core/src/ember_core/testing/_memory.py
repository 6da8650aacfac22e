"""Memory a training step uses, in bytes. `kept_for_backward`: what its autograd graph keeps between the forward
and the backward, the measure activation checkpointing (and a partitioner's choice of saved values) is about; eager's
autograd and a compiled function's `autograd.Function` both hand what they keep to
`torch.autograd.graph.saved_tensors_hooks`. `peak_allocated`: the most CPU memory allocated at once while a
function runs, from the profiler's memory timeline; ember's buffers are torch tensors, so it sees them too."""

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


def peak_allocated(fn: Callable[[], object]) -> int:
    """Run `fn()` under torch's profiler and return the peak of CPU memory allocated while it ran, above what was
    allocated when it started (frees of what was allocated before count)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        fn()
    now = top = 0
    for _, action, _, size in sorted(prof._memory_profile().timeline, key=lambda r: r[0]):
        if action.name == "CREATE":
            now += size
        elif action.name == "DESTROY":
            now -= size
        top = max(top, now)
    return top
