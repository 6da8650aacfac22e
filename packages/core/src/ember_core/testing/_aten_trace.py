"""`trace_aten(fn, *args)`: a function's functional ATen graph as ember's capture sees it, for the unit tests of the
stages after capture (lowering, the codegens) that trace small functions without a frontend: ember-core's op set
(`decompositions()`, with the ops kept whole) and its Autograd kernels for traces (`eager_derivatives()`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from ..execution import eager_derivatives
from ..graph import Graph, decompositions, from_fx


def trace_aten(fn: Callable, *args: Any, mode: str = "fake", name: str = "graph") -> Graph:
    """The graph of `fn(*args)`, its outputs flattened into a tuple; `mode` is make_fx's tracing mode."""
    def flat(*a: Any) -> tuple:
        return tuple(pytree.tree_leaves(fn(*a)))

    with eager_derivatives():
        gm = make_fx(flat, decomposition_table=decompositions(), tracing_mode=mode, _allow_non_fake_inputs=True)(*args)
    return from_fx(gm, name=name)
