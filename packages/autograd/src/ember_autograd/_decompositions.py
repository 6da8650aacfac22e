"""The decomposition table the joint graph is traced with: torch's core ATen set, minus every random op.

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


def is_random(op: Any) -> bool:
    """Whether an ATen overload draws from the random generator."""
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


@functools.cache
def decompositions() -> dict[Any, Callable]:
    """torch's core ATen decompositions without those of random ops. Cached; do not mutate."""
    return {op: fn for op, fn in core_aten_decompositions().items() if not is_random(op)}
