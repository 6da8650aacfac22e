"""What capture changes in torch while it traces, in one way.

Some of what a trace must see or refuse reaches no torch mode: `print`, `Tensor.backward`, `Function.apply`. For
those, `SharedPatch` puts a replacement in the attribute itself, which every thread then sees. The first thread to
`hold()` the patch installs the replacements, the last one to leave puts the originals back, under a lock, also
when the trace raised; an attribute someone else has patched since is left as it is. A replacement decides per
thread what to do: it checks state the holding thread set (a flag, a stack) and otherwise calls the original, so
threads that are not tracing run the real thing.

`anchor_stack_traces` asks make_fx to keep a function's frames in the stack traces of the nodes it records.
`forgetting_failed_compiles` undoes what a failed trace left in Dynamo's caches.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from ember_core import wrap_once

from ._errors import HigherOrderOpRefused

ABSENT = object()  # what `originals[k]` is for an attribute the owner inherits: the patch adds it, then removes it


class SharedPatch:
    """Attributes (`(owner, name)`) replaced while at least one thread holds the patch. `replace(k, original)` makes
    the replacement of the k-th from what the owner's own `__dict__` held (`ABSENT` where it held nothing: the
    owner inherits the attribute, and the patch deletes its own again); `originals[k]` is what the k-th held when
    the patch went in."""

    def __init__(self, places: Sequence[tuple[Any, str]], replace: Callable[[int, Any], Any]):
        self.places, self.replace = tuple(places), replace
        self.lock = threading.Lock()
        self.holders = 0
        self.originals: list[Any] = [vars(owner).get(name, ABSENT) for owner, name in self.places]
        self.installed: list[Any] = []

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self.lock:
            if self.holders == 0:
                self.originals = [vars(owner).get(name, ABSENT) for owner, name in self.places]
                self.installed = [self.replace(k, original) for k, original in enumerate(self.originals)]
                for (owner, name), new in zip(self.places, self.installed):
                    setattr(owner, name, new)
            self.holders += 1
        try:
            yield
        finally:
            with self.lock:
                self.holders -= 1
                if self.holders == 0:  # put back what is still ours
                    for (owner, name), mine, original in zip(self.places, self.installed, self.originals):
                        if vars(owner).get(name) is mine:
                            if original is ABSENT:
                                delattr(owner, name)
                            else:
                                setattr(owner, name, original)


def anchor_stack_traces(fn: Any) -> None:
    """Keep `fn`'s frames in node stack traces (make_fx keeps only frames named `forward` otherwise): a method's
    function, and through decorators' wrappers (`once_differentiable`) the author's own. Where torch's tracer
    takes no anchors (torch 2.11), its frame filter is wrapped once to keep ember's (`_keep_anchored_frames`)."""
    target = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(target, "__code__", None)
    if code is None:
        return
    anchor = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
    if anchor is not None:
        anchor(target)
    elif _keep_anchored_frames():
        _ANCHORS.add((code.co_filename, code.co_name))


_ANCHORS: set[tuple[str, str]] = set()  # (file, function name) of frames kept where torch has no anchors


def _keep_anchored_frames() -> bool:
    """Wrap the tracer's frame filter so that, where it keeps only `forward` frames, the frames of `_ANCHORS` stay
    too, in stack order (as torch's own anchors do on later versions). False where the tracer has no such filter."""
    return wrap_once(torch.fx.proxy.TracerBase, "_filter_traceback_frames", _keeping_anchors, "anchored-frames")


def _keeping_anchors(current: Callable) -> Callable:
    def keeping_anchors(self: Any, summary: traceback.StackSummary) -> traceback.StackSummary:
        kept = current(self, summary)
        if not getattr(self, "_record_forward_stack_traces_only", False):
            return kept
        kept_at = {(f.filename, f.lineno, f.name) for f in kept}
        return traceback.StackSummary.from_list(
            [f for f in summary if (f.filename, f.lineno, f.name) in kept_at or (f.filename, f.name) in _ANCHORS])

    return keeping_anchors


@contextlib.contextmanager
def forgetting_failed_compiles() -> Iterator[None]:
    """A block whose failure, if it came out of Dynamo or a higher-order op (torch.cond compiles itself with
    Dynamo), resets Dynamo's caches of torch's own code (`forget_torch_code_compiles`). Other failures (a branch on
    data, a side effect) leave them alone."""
    try:
        yield
    except BaseException as e:
        if _through_dynamo(e):
            forget_torch_code_compiles()
        raise


def _through_dynamo(e: BaseException | None, depth: int = 4) -> bool:
    if e is None or depth == 0:
        return False
    if isinstance(e, (torch._dynamo.exc.TorchDynamoException, HigherOrderOpRefused)):
        return True
    return _through_dynamo(e.__cause__ or e.__context__, depth - 1)


def forget_torch_code_compiles() -> None:
    """Reset Dynamo's caches of torch's own code objects. torch.cond, while_loop and flex_attention compile
    themselves with Dynamo when called outside torch.compile; such a compile that failed under a trace's dispatch
    modes left those caches failing for every later eager call of the op in the process (torch 2.13: "torch.* op
    returned non-Tensor"), the function's own eager run included. `torch._dynamo.reset()` clears it too, and every
    compiled function of the user's with it; the user's code objects keep theirs here. Where torch keeps these
    caches otherwise, nothing is reset."""
    try:
        from torch._dynamo import convert_frame
        from torch._dynamo.eval_frame import reset_code
        tracked = [*convert_frame.input_codes.seen, *convert_frame.output_codes.seen]
        lock = convert_frame.compile_lock
    except (ImportError, AttributeError):
        return
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    with lock:
        for ref in tracked:
            code = ref()
            if code is not None and os.path.abspath(code.co_filename).startswith(torch_dir):
                reset_code(code)
