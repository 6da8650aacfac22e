"""One process-wide lock for tracing.

make_fx, fake tensor modes and the patches that tracing installs live in process-global torch state (the active
patcher, the proxy mode's tensor tracker), so two threads that trace at once corrupt each other's trace. Every
stage that traces takes `tracing_lock()` around it. It is re-entrant: a frontend that holds it while it traces may
call a stage that takes it again (the runtime tracing the joint graph inside a frontend's compile).

`eager_derivatives()` holds it too, while it swaps the Python kernels torch registers at the Autograd key of a few
ops, which the Python dispatcher a trace enables runs before autograd (they decompose the op, and autograd
differentiates the pieces): those of the ops ember keeps whole for their derivatives (`NUMERICALLY_KEPT`) are set
aside, so autograd takes eager's formula; those of the margin losses are replaced by ember's (`_trace_kernels.py`),
whose pieces have eager's values and derivative, and cosine_similarity, which torch decomposes in C++ (clamping in
place under no_grad, which a graph cannot say), gets ember's kernel at its composite key.

`without_saved_tensor_hooks()`: a trace that records autograd (the joint graph, a frontend's capture) saves tensors
as any autograd graph does, and the user's saved-tensor hooks active around the call that compiles (a
non-reentrant `torch.utils.checkpoint` around a compiled module, `save_on_cpu`) would see them: the checkpoint's
recomputation hook stopped ember's trace midway. Inside, torch ignores those hooks (its tracing flag, which
Dynamo's and AOTAutograd's traces set too); they apply at run time, to what ember's `autograd.Function` saves.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..graph._op_set import NUMERICALLY_KEPT
from ..graph._ops import resolve_op
from ._trace_kernels import TRACE_KERNELS

_LOCK = threading.RLock()
_AUTOGRAD = torch._C.DispatchKey.Autograd
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd
_swapped: list[tuple[Any, Any, Callable | None]] = []  # (op, key, torch's kernel there or None) while swapped
_depth = 0  # nested `eager_derivatives` blocks (one thread: they hold the lock)


def tracing_lock() -> threading.RLock:
    """The lock every trace holds (make_fx and anything else that installs process-wide tracing state)."""
    return _LOCK


_set_hooks_tracing = getattr(torch._C._autograd, "_saved_tensors_hooks_set_tracing", None)


@contextlib.contextmanager
def without_saved_tensor_hooks() -> Iterator[None]:
    """The user's saved-tensor hooks ignored inside (see the module's docstring); a no-op on a torch without the
    flag."""
    if _set_hooks_tracing is None:
        yield
        return
    before = _set_hooks_tracing(True)
    try:
        yield
    finally:
        _set_hooks_tracing(before)


@contextlib.contextmanager
def eager_derivatives() -> Iterator[None]:
    """Holding the tracing lock: the kept ops that torch decomposes above autograd for traces (softshrink) reach
    autograd whole, and the margin losses decompose into ember's pieces (`TRACE_KERNELS`), so that autograd
    differentiates as eager does. The outermost block swaps torch's kernels and puts them back when it ends."""
    global _depth
    with _LOCK:
        if _depth == 0:
            _swap_in()
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
            if _depth == 0:
                for op, key, kernel in _swapped:
                    if kernel is None:  # torch had none: ours goes
                        op.py_kernels.pop(key, None)
                    else:
                        op.py_kernels[key] = kernel
                    op._dispatch_cache.clear()
                _swapped.clear()


def _swap_in() -> None:
    ours: dict[str, Callable | None] = {name: None for name in NUMERICALLY_KEPT} | TRACE_KERNELS
    for name, kernel in ours.items():
        op = resolve_op(name)
        kernels = getattr(op, "py_kernels", None)
        if kernels is None or (kernel is None and _AUTOGRAD not in kernels):  # nothing of torch's to set aside
            continue
        # where torch has a Python kernel above autograd, ours takes its key; an op whose C++ composite decomposes
        # it (cosine_similarity) takes ours at that composite's key, which the Python dispatcher resolves it to
        key = _AUTOGRAD if _AUTOGRAD in kernels or not op.has_kernel_for_dispatch_key(_COMPOSITE) else _COMPOSITE
        _swapped.append((op, key, kernels.pop(key, None)))
        if kernel is not None:
            kernels[key] = kernel
        op._dispatch_cache.clear()
