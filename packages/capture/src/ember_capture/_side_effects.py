"""Python side effects a graph cannot replay, refused while a thread traces.

While a thread traces, `print` (but into a `StringIO`, which nobody sees), `Tensor.register_hook`,
`Tensor.retain_grad` (the graph's output would be another tensor than the one that keeps its grad) and a backward
pass (`Tensor.backward`, `torch.autograd.backward`: a training step traced whole would accumulate into `.grad` from
inside the trace) raise `SideEffect` in that thread; the trace frontend turns it into a fallback naming what was
called. Other threads keep the real functions (see `_patches.SharedPatch`).

A symbolic size turned into text (`f"rows={x.shape[0]}"`, `str(n)`, `f"{n:5d}"`, `f"{n / 2:.2f}"`, a symbolic
float or bool as well) is specialized in that thread: the text is the value's, and the trace holds for that value
only (a guard), as Dynamo does it. The text was the symbol's name (`rows=s25`), returned or used as it was at every
size, and a format spec raised TypeError (symbolic types have no `__format__` of their own).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._patches import ABSENT, SharedPatch


class SideEffect(Exception):
    """Raised in place of a Python side effect the trace cannot record (`print`, `Tensor.register_hook`)."""


# (owner, attribute, what the error calls it)
_PLACES = ((builtins, "print", "print()"), (torch.Tensor, "register_hook", "Tensor.register_hook()"),
           (torch.Tensor, "retain_grad", "Tensor.retain_grad()"),
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


_SYMBOLIC = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}  # each type: its value (a guard)
_TEXT_PLACES = [(cls, name) for cls in _SYMBOLIC for name in ("__repr__", "__format__")]


def _as_its_value(k: int, original: Callable) -> Callable:
    cls, name = _TEXT_PLACES[k]
    to_value = _SYMBOLIC[cls]

    def value(self: Any) -> Any:
        """The value, or None where it has none yet: a data-dependent symbol (`u0`), whose error message torch
        builds with this very repr."""
        if not _forbidden():
            return None
        try:
            return to_value(self)
        except Exception:  # noqa: BLE001 - GuardOnDataDependentSymNode and kin: the symbol's own text then
            return None

    if name == "__repr__":  # str() and f-strings without a spec call it too
        def replacement(self: Any) -> str:
            v = value(self)
            return original(self) if v is None else repr(v)
        return replacement

    def formatted(self: Any, spec: str) -> str:
        v = value(self)
        if v is not None:
            return format(v, spec)
        return object.__format__(self, spec) if original is ABSENT else original(self, spec)
    return formatted


_text = SharedPatch(_TEXT_PLACES, _as_its_value)


@contextlib.contextmanager
def side_effects_forbidden() -> Iterator[None]:
    """Refuse the side effects above in this thread for the block (re-entrant)."""
    with _patch.hold(), _text.hold():
        before, _local.on = _forbidden(), True
        try:
            yield
        finally:
            _local.on = before
