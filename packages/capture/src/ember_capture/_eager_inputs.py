"""Calls that Dynamo runs eagerly without a word to ember: arguments it cannot fake (quantized, sparse, nested
tensors). Dynamo never calls the backend for them, so ember heard nothing: no event, no warning, and `explain`
would say "0 graphs, 0 fallbacks". The Dynamo frontend therefore looks at each call's top-level arguments (what a
compiled function or module is called with: a few attribute reads per tensor, about 0.3 us a call) and reports the
first such argument of a compiled function once per argument and kind: a `fallback` event (cause `eager`) and a
`FallbackWarning`, naming the argument and what it is, as the trace frontend does for its inputs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from ember_core import unsupported_tensor, warn_fallback

from ._report import report

_STRIDED = torch.strided


class EagerInputs:
    """Checks the arguments of one compiled function (`fn`, named `label`) and says once why a call runs eagerly."""

    def __init__(self, fn: Callable, label: str):
        self.fn, self.label = fn, label
        self.said: set[tuple[str, str]] = set()

    def __call__(self, _module: Any, args: tuple, kwargs: dict) -> None:
        """As a module's forward pre-hook (an object, not a closure: the module pickles and copies as before)."""
        self.check(args, kwargs)

    def check(self, args: tuple, kwargs: dict) -> None:
        for k, a in enumerate(args):
            if isinstance(a, torch.Tensor) and (a.layout is not _STRIDED or a.is_quantized or a.is_nested):
                self._say(self._name(k, args, kwargs), unsupported_tensor(a))
                return
        for name, a in kwargs.items():
            if isinstance(a, torch.Tensor) and (a.layout is not _STRIDED or a.is_quantized or a.is_nested):
                self._say(repr(name), unsupported_tensor(a))
                return

    def _name(self, k: int, args: tuple, kwargs: dict) -> str:
        """The parameter argument `k` binds to (`'x'`), else its position."""
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs).arguments
            return repr(list(bound)[k])
        except (TypeError, ValueError, IndexError):
            return f"argument {k}"

    def _say(self, which: str, kind: str | None) -> None:
        if kind is None or (which, kind) in self.said:
            return
        self.said.add((which, kind))
        reason = f"input {which} is {kind}: Dynamo runs the call eagerly (ember traces dense, strided tensors only)"
        report("fallback", f"{self.label} runs eagerly: {reason}", function=self.label, reason=reason, cause="eager")
        warn_fallback(f"ember: {self.label} runs eagerly: {reason}", "eager", stacklevel=4)


def checking_inputs(optimized: Any, fn: Callable, label: str) -> Any:
    """`optimized` (what Dynamo made of `fn`) with each call's arguments checked: a forward pre-hook on a module,
    a wrapper around a function. (Not for an FX graph: see `DynamoFrontend.wrap`.)"""
    eager = EagerInputs(fn.forward if isinstance(fn, torch.nn.Module) else fn, label)
    if isinstance(optimized, torch.nn.Module):
        optimized.register_forward_pre_hook(eager, with_kwargs=True)
        return optimized

    @functools.wraps(optimized)
    def call(*args: Any, **kwargs: Any) -> Any:
        eager.check(args, kwargs)
        return optimized(*args, **kwargs)

    return call
