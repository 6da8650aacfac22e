"""The op set of every ember graph: torch's core ATen decompositions, minus those of random ops.

Capture and autograd both trace with `decompositions()`, so every stage sees the same ops.

A decomposition of a random op (`aten.bernoulli.default` → `rand_like(x) < x`) draws different random numbers from
the op it replaces, so the compiled graph would no longer match eager under the same seed. Ops tagged
`nondeterministic_seeded` therefore stay as they are; `aten.native_dropout` is not in the core table at all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions

from ._errors import GraphError
from ._ops import resolve_op


def is_random(op: Any) -> bool:
    """Whether an ATen overload (or its schema name, `aten.native_dropout.default`) draws from the random generator."""
    if isinstance(op, str):
        try:
            op = resolve_op(op)
        except GraphError:
            return False
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


@functools.cache
def decompositions() -> dict[Any, Callable]:
    """torch's core ATen decompositions without those of random ops. Cached; do not mutate."""
    return {op: fn for op, fn in core_aten_decompositions().items() if not is_random(op)}
