"""Ops with a side effect (those torch registers and those ember knows of), and the functionalization that keeps
them as plain graph nodes."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

from .._errors import GraphError
from ..graph._ops import resolve_op

# Ops with a side effect whatever this torch's registry says: torch 2.11 does not register
# `aten._linalg_check_errors`, so its traces dropped the check and a compiled `linalg.cholesky` of a matrix that is
# not positive-definite (or `linalg.inv` of a singular one) returned numbers where eager raises.
_KNOWN_EFFECTS = frozenset({"aten::_linalg_check_errors"})


def has_effect(op: Any) -> bool:
    """Whether an ATen overload (or its schema name) has a side effect: one torch registers
    (`torch._library.effects`: `aten._print` prints) or one ember knows of on every torch (`_KNOWN_EFFECTS`:
    `aten._linalg_check_errors` raises on a failed factorization). Such a node has no output anyone reads, yet
    every stage keeps it, in its place in the graph (see `EffectfulFunctionalMode`)."""
    if isinstance(op, str):
        try:
            op = resolve_op(op)
        except GraphError:
            return False
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if op._schema.name in _KNOWN_EFFECTS:
        return True
    from torch._higher_order_ops.effects import _get_effect

    return _get_effect(op) is not None


def is_impure_node(node: fx.Node) -> bool:
    """fx's dead-code elimination predicate with ember's effects: `gm.graph.eliminate_dead_code(is_impure_node)`
    keeps what fx keeps (random ops, in-place ops, asserts) and every node of an op with a side effect."""
    return node.is_impure() or node.op == "call_function" and has_effect(node.target)


class EffectfulFunctionalMode(FunctionalTensorMode):
    """Functionalization that records an op with a registered side effect as a plain node of the graph.

    torch marks some ATen ops effectful (`torch._higher_order_ops.effects`: `_register_effectful_op`, read back
    by `_get_effect`): `aten._linalg_check_errors` raises when a factorization failed (cholesky of a matrix that
    is not positive-definite, inv of a singular one), `aten._print` prints. Its own functionalization threads such
    an op through "effect tokens": a `with_effects` higher-order op taking and giving back a token tensor that the
    traced program must receive as an input and return as an output, which is what orders the effects and keeps
    them from dead-code elimination in AOT autograd's graphs. Without the tokens set up, FunctionalTensorMode
    fails ("Could not find a token for effect EffectType.ORDERED").

    An ember graph has a sounder carrier for the same two facts: its nodes are a list in program order, and
    `ember_core.has_effect(op)` names the ops every stage must keep. So the op is run here on the plain (synced,
    unwrapped) tensors, below functionalization, and make_fx records it as it is, in program order, reading the
    values it checks; it has no tensor output to functionalize. Each later stage keeps it, in order: fx's
    dead-code elimination treats effectful ops as impure, the joint trace and the partitioner keep it in the
    forward, and lowering makes it an extern call (the ATen kernel raises at run time, as eager does). The ops
    torch marks have no aliasing and no tensor outputs; one with tensor outputs is refused rather than guessed at.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not has_effect(func):
            return super().__torch_dispatch__(func, types, args, kwargs)
        args, kwargs = pytree.tree_map_only(FunctionalTensor, _unwrap_synced, (args, kwargs or {}))
        out = func(*args, **kwargs)
        if any(isinstance(o, torch.Tensor) for o in pytree.tree_leaves(out)):
            raise GraphError(f"{func} has a side effect and a tensor output; ember cannot capture it")
        return out


def _unwrap_synced(x: FunctionalTensor) -> torch.Tensor:
    torch._sync(x)
    return torch._from_functional_tensor(x.elem)
