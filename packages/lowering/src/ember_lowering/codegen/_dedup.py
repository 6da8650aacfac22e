"""Kernels that differ only in their names, printed once.

A model of repeated layers prints the same kernel once per layer: a transformer of six identical blocks, 43 kernels
of 22 bodies; a ViT's training step, 137 kernels of about 30. Each printed function costs the compiler behind the
codegen its time (g++ for C++; Triton's front end, LLVM and ptxas for Triton), so a codegen keeps the first kernel
of each group and binds the others' names to it, and every call site keeps its kernel's own name.

Kernels are the same when their text is, but for the function's name, its origins comment and the names of its
parameters (the plan's buffer names, which differ from layer to layer). A printer lists a kernel's parameters in
the order its body first uses them, so that kernels of one body take theirs in one order; a parameter is then
known by its position. Each codegen says what its kernel's text is without the name and origins (its `canonical`
function); the grouping and the renaming of parameters are here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*")


def with_placeholders(text: str, params: Sequence[str], inner: Collection[str] = ()) -> str:
    """`text` with each parameter name, as a whole identifier, replaced by its position (as `\\0<n>`, which no
    identifier spells: the result is a key, never printed), then each of the `inner` names it uses (buffers a
    kernel declares for itself, named per plan) by the order it first appears in."""
    if inner:
        params = [*params, *dict.fromkeys(m for m in _IDENTIFIER.findall(text) if m in inner)]
    if not params:
        return text
    position = {p: n for n, p in enumerate(params)}
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, position)) + r")\b")
    return pattern.sub(lambda m: f"\0{position[m.group(0)]}", text)


def same_kernels(kernels: Sequence[Any], canonical: Callable[[Any], str]) -> dict[str, str]:
    """Each kernel's `name` → the name of the first kernel with its canonical text (itself, for a first one)."""
    first: dict[str, str] = {}
    return {k.name: first.setdefault(canonical(k), k.name) for k in kernels}
