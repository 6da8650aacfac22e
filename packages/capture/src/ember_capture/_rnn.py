"""The final states of `torch.lstm` in the shape of the initial ones, and the LSTM calls a trace cannot train.

torch 2.11's Python decomposition of `aten.lstm.input` (the one a trace takes when the input or the weights need a
gradient) squeezes each layer's final state along dimension 1 instead of 0: `h_n` and `c_n` came back (layers, 1,
batch, hidden) instead of (layers, batch, hidden), or lost the batch dimension at batch 1 — the right values in the
wrong shape, which broadcasting can carry on with silently (torch's own AOT backends give the same shapes). Seen
above the decomposition, here, each state is given its initial state's shape when the two hold the same number of
elements and differ in shape: the wrong shape is what is detected, not a torch version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from ._errors import CaptureError

_LSTMS = frozenset({torch.lstm, torch._VF.lstm})


class LstmStateShapes(TorchFunctionMode):
    """Reshapes `torch.lstm`'s final states `(h_n, c_n)` to its initial states' shapes where they differ."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _LSTMS and args and isinstance(args[0], torch.Tensor) and _untrainable_trace(args):
            raise CaptureError("an LSTM whose input needs no gradient but whose weights or states do: torch's trace "
                               "of it takes oneDNN's inference layer (no workspace), whose backward cannot run")
        result = func(*args, **(kwargs or {}))
        if func not in _LSTMS or len(args) < 2 or not isinstance(args[1], (list, tuple)):
            return result
        return states_as_initial(result, args[1])


def _untrainable_trace(args: Sequence[Any]) -> bool:
    """torch's decomposition of `aten.lstm.input` picks oneDNN's layer (`mkldnn_rnn_layer`, train=False) on the CPU
    whenever the input does not require grad, even where the weights or the initial states do. (With oneDNN off
    for the call the decomposition takes its layer of plain ops, which trains, but unrolled over the time steps
    it ran 4.3x slower than eager's oneDNN layer, after a 41 s compile: `benchmarks/rnn.py`, before lowering's
    `cat-slice-scatters`. Eager it stays.)"""
    if not torch.is_grad_enabled() or args[0].requires_grad or args[0].device.type != "cpu":
        return False
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves(args[1:]))


def states_as_initial(result: Any, initial: Sequence[Any]) -> Any:
    """`(out, h_n, c_n)` with each final state in its initial state's shape (see the module's docstring)."""
    if not isinstance(result, tuple) or len(result) != 3:
        return result
    out, *states = result
    return (out, *(_as_shape(s, h) for s, h in zip(states, initial)))


def _as_shape(state: Any, initial: Any) -> Any:
    if not isinstance(state, torch.Tensor) or not isinstance(initial, torch.Tensor) or state.shape == initial.shape:
        return state
    if state.numel() != initial.numel():
        return state
    return state.reshape(initial.shape)
