"""Python side effects a graph cannot replay, refused while a thread traces.

While a thread traces, `print` (but into a `StringIO`, which nobody sees), `Tensor.register_hook` and a backward
pass (`Tensor.backward`, `torch.autograd.backward`: a training step traced whole would accumulate into `.grad` from
inside the trace) raise `SideEffect` in that thread; the trace frontend turns it into a fallback naming what was
called. Other threads keep the real functions (see `_patches.SharedPatch`).

A symbolic size turned into text (`f"rows={x.shape[0]}"`, `str(n)`) is specialized in that thread: the text is the
size's value, and the trace holds for that value only (a guard), as Dynamo does it. The text was the symbol's name
(`rows=s25`), returned or used as it was at every size.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._patches import SharedPatch


class SideEffect(Exception):
    """Raised in place of a Python side effect the trace cannot record (`print`, `Tensor.register_hook`)."""


# (owner, attribute, what the error calls it)
_PLACES = ((builtins, "print", "print()"), (torch.Tensor, "register_hook", "Tensor.register_hook()"),
           (torch.Tensor, "backward", "Tensor.backward()"), (torch.autograd, "backward", "torch.autograd.backward()"))
_local = threading.local()


def _forbidden() -> bool:
    return getattr(_local, "on", False)


def _refusing(k: int, original: Callable) -> Callable:
    what = _PLACES[k][2]

    def replacement(*args: Any, **kwargs: Any) -> Any:  # a plain function: `tensor.backward()` passes the tensor
        if _forbidden() and not (k == 0 and _into_a_buffer(kwargs.get("file"))):
            raise SideEffect(what)
        return original(*args, **kwargs)
    return replacement


def _into_a_buffer(file: Any) -> bool:
    """A print into a `StringIO` (logging formats an exception's traceback so, as fake tensors log an op's failure
    while a trace runs) writes nothing anybody sees until the program reads it: not output the trace would drop."""
    return isinstance(file, io.StringIO)


_patch = SharedPatch([(owner, name) for owner, name, _ in _PLACES], _refusing)


def _as_its_value(k: int, original: Callable) -> Callable:
    def replacement(self: torch.SymInt) -> str:
        return repr(int(self)) if _forbidden() else original(self)  # int(): the value, guarded
    return replacement


_text = SharedPatch([(torch.SymInt, "__repr__")], _as_its_value)  # str() and f-strings call it too


@contextlib.contextmanager
def side_effects_forbidden() -> Iterator[None]:
    """Refuse the side effects above in this thread for the block (re-entrant)."""
    with _patch.hold(), _text.hold():
        before, _local.on = _forbidden(), True
        try:
            yield
        finally:
            _local.on = before
