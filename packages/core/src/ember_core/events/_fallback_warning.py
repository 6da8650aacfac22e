"""Fallback warnings: the `fallback` events that a user is also told about with a Python warning.

Every fallback is an event, so logs, dumps and `ember.explain` see all of them. A warning is for the ones a user
would otherwise never notice and would want to act on: the code they asked to compile is not compiled at all, or a
whole graph loses its kernels. Routine fallbacks, those ember takes by design on inputs that are fine, stay events
only: warning on them would teach users to silence ember's warnings.
"""

from __future__ import annotations

import os
import warnings

# cause → why a fallback of that cause warns. The others do not:
# - `kernel`: one kernel runs in the loop-IR interpreter and the rest of the graph natively; it is a codegen's
#   known gap, counted by its tests, and the graph is still compiled;
# - `cudagraphs`: CPU inputs, random ops or held outputs are ordinary calls that a CUDA graph cannot replay; the
#   kernels still run;
# - `autograd`: a double backward, or a joint graph that cannot be traced faithfully, runs through ATen as
#   torch.compile's does too; the forward is still compiled.
WARNED_CAUSES: dict[str, str] = {
    "eager": "the function or graph is not compiled at all, and the user can often change the construct that "
             "stopped the frontend",
    "build": "generated code that does not build is a codegen bug, worth a report",
    "lowering": "the whole graph runs in the interpreter codegen, far slower than its kernels would",
    "print": "the whole graph runs in the interpreter codegen, far slower than its kernels would",
    "device": "the chosen codegen cannot serve the graph's device: a configuration that can never be fast",
    "input": "the whole graph runs in the interpreter codegen; `resolve_neg()` / `resolve_conj()` on the input "
             "lets it compile",
}


class FallbackWarning(UserWarning):
    """ember runs part of a program a slower way than compiled (eagerly, or in the interpreter codegen).
    `warnings.filterwarnings("ignore", category=ember_core.FallbackWarning)` silences them; the `fallback`
    events stay."""


def warn_fallback(message: str, cause: str, where: str | None = None, *, stacklevel: int = 1) -> None:
    """Warn with `message` when `cause` is one of `WARNED_CAUSES`; do nothing for the others. `where` is the
    user's `file:line` the fallback is about, when known: the warning then points there. Otherwise it points
    `stacklevel` frames above the caller (1: the caller's caller). The caller warns once per compiled function
    or graph; this function does not count."""
    if cause not in WARNED_CAUSES:
        return
    place = _split_where(where)
    if place is None:
        warnings.warn(message, FallbackWarning, stacklevel=stacklevel + 2)
        return
    filename, lineno = place
    module = os.path.splitext(os.path.basename(filename))[0] or "<unknown>"
    warnings.warn_explicit(message, FallbackWarning, filename, lineno, module=module)


def _split_where(where: str | None) -> tuple[str, int] | None:
    """`/a/b.py:12` → (`/a/b.py`, 12); None when it is not a file and a line number."""
    if not where:
        return None
    filename, _, line = where.rpartition(":")
    if not filename or not line.isdigit():
        return None
    return filename, int(line)
