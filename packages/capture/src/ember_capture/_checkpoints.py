"""Activation checkpointing under the trace frontend: the marks Dynamo's checkpoint op gives, given by the trace.

Under Dynamo, `torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=False)` becomes a higher-order op whose
trace marks the nodes `fn` records (fx meta `recompute`, `ac_graph_id`; `ember_core.checkpoint_meta` reads them).
The trace frontend runs `checkpoint` itself, so its nodes came out unmarked, and the partitioner saved what eager's
checkpoint recomputes (on torch 2.11 the trace could not capture the call at all: the function ran eagerly). While
a thread traces, torch's non-reentrant checkpoint generator (which `checkpoint` looks up at each call) is replaced:
the function runs plainly (under selective checkpointing's forward context, if any), and the nodes it records get
a region of their own and `CheckpointPolicy.PREFER_RECOMPUTE`, where selective checkpointing's policy did not mark
them already (torch 2.13's marks them; 2.11's does not, and its policy is then not followed: everything is
recomputed). Other threads, and calls outside a trace, run torch's generator (see `_patches.SharedPatch`).

The reentrant form (`use_reentrant=True`) is an `autograd.Function` the trace frontend does not capture: the
function runs eagerly, visibly (`_function_apply`).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.checkpoint as torch_checkpoint
from torch.fx.experimental.proxy_tensor import get_proxy_mode

from ._patches import SharedPatch

_GENERATOR = "_checkpoint_without_reentrant_generator"
_local = threading.local()
_regions = itertools.count(1)  # numbered again from 1 per graph by `from_fx`


def _marking(_k: int, original: Any) -> Any:
    signature = inspect.signature(original)

    def generator(*args: Any, **kwargs: Any) -> Iterator[None]:
        mode = get_proxy_mode() if getattr(_local, "on", False) else None
        if mode is None:
            return (yield from original(*args, **kwargs))
        # traced: what torch's generator sets up (saved-tensor hooks, RNG state, torch 2.11's `_NoopSaveInputs`
        # function, which the trace cannot capture) serves eager autograd, which the graph does not use; only
        # selective checkpointing's forward context runs, whose policy marks the nodes where torch makes it do so
        context_fn = signature.bind(*args, **kwargs).arguments.get("context_fn")
        forward = context_fn()[0] if callable(context_fn) else contextlib.nullcontext()
        last, region = _tail(mode.tracer.graph), next(_regions)
        with forward:
            yield
        _mark_after(last, region)
    return generator


def _tail(graph: Any) -> Any:
    nodes = list(graph.nodes)
    return nodes[-1] if nodes else graph._root


def _mark_after(last: Any, region: int) -> None:
    policy = torch_checkpoint.CheckpointPolicy.PREFER_RECOMPUTE
    node = last.next
    while node.op != "root":
        if node.op == "call_function":
            if not isinstance(node.meta.get("recompute"), torch_checkpoint.CheckpointPolicy):
                node.meta["recompute"] = policy
            node.meta.setdefault("ac_graph_id", region)
        node = node.next


_patch = SharedPatch([(torch_checkpoint, _GENERATOR)], _marking) if hasattr(torch_checkpoint, _GENERATOR) else None


@contextlib.contextmanager
def checkpoints_marked() -> Iterator[None]:
    """Mark the nodes of checkpointed calls this thread traces in the block (re-entrant)."""
    hold: Callable[[], Any] = _patch.hold if _patch is not None else contextlib.nullcontext
    with hold():
        before, _local.on = getattr(_local, "on", False), True
        try:
            yield
        finally:
            _local.on = before
