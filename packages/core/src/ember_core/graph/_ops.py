"""Op names in the schema and the callables they stand for.

Tensor ops are ATen (or prims) overloads named as torch prints them: `aten.mul.Tensor`. Arithmetic on symbolic
sizes is a small closed set of Python functions named `operator.mul`, `math.ceil`, `torch.sym_max` ...
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import torch

from .._errors import GraphError

_PY_MODULES = {"operator": operator, "math": math, "torch": torch}
SYM_OPS: dict[str, Callable] = {
    f"{mod}.{fn}": getattr(_PY_MODULES[mod], fn)
    for mod, names in {
        "operator": "add sub mul floordiv truediv mod neg pow eq ne lt le gt ge and_ or_ not_ abs pos".split(),
        "math": "ceil floor trunc sqrt".split(),
        "torch": "sym_float sym_int sym_max sym_min sym_not sym_sqrt sym_ite".split(),
    }.items()
    for fn in names
    if hasattr(_PY_MODULES[mod], fn)
}
_SYM_NAMES = {fn: name for name, fn in SYM_OPS.items()}


# The parts of an op name: identifiers (ATen has `_to_copy` and `__lshift__`); a namespace or an overload never
# starts with `__`, where Python keeps its own attributes.
_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OUTER_PART = re.compile(r"(?!__)[A-Za-z_][A-Za-z0-9_]*")
# What each step of `torch.ops.<ns>.<op>.<overload>` must give; a name that reaches anything else is refused.
_STEPS = (torch._ops._OpNamespace, torch._ops.OpOverloadPacket, torch._ops.OpOverload)


@functools.cache
def resolve_op(name: str) -> Callable:
    """The callable for an op name; `GraphError` if there is none. The name is file text: it must name an
    operator the dispatcher has registered (asked of its table, which imports nothing and creates nothing) before
    `torch.ops` is walked to it, and each step of that walk is type-checked."""
    if name in SYM_OPS:
        return SYM_OPS[name]
    parts = name.split(".")
    if len(parts) != 3 or not all(pattern.fullmatch(p) for pattern, p in zip((_OUTER_PART, _PART, _OUTER_PART), parts)):
        raise GraphError(f"unknown op {name!r}: expected 'namespace.op.overload' like 'aten.mul.Tensor'"[:200])
    if not _registered(*parts):
        raise GraphError(f"unknown op {name!r}: torch.ops has no such overload"[:200])
    found: Any = torch.ops
    for part, kind in zip(parts, _STEPS):
        try:
            found = getattr(found, part)
        except (AttributeError, RuntimeError):
            raise GraphError(f"unknown op {name!r}: torch.ops has no such overload") from None
        if not isinstance(found, kind):
            raise GraphError(f"unknown op {name!r}: {part!r} is not an operator {kind.__name__}")
    return found


def _registered(namespace: str, op: str, overload: str) -> bool:
    """Does the dispatcher know `namespace::op.overload`? (Its `default` overload has the empty name.)"""
    try:
        torch._C._dispatch_find_schema_or_throw(f"{namespace}::{op}", "" if overload == "default" else overload)
    except RuntimeError:
        return False
    return True


@functools.cache
def returns_new_storage(name: str) -> bool:
    """Does the op give every result storage of its own: its schema says no result aliases an argument, and it
    writes none? (Functionalization counts on the same promise.) False for symbolic-size functions and names
    this torch does not know."""
    try:
        op = resolve_op(name)
    except GraphError:
        return False
    schema = getattr(op, "_schema", None)
    if schema is None or schema.is_mutable:
        return False
    return all(r.alias_info is None for r in schema.returns)


@functools.cache
def may_write(name: str) -> bool:
    """Might the op write into an argument (in place, or `out=`)? True where its schema says so, and for names
    this torch does not know; False for symbolic-size functions."""
    try:
        op = resolve_op(name)
    except GraphError:
        return True
    schema = getattr(op, "_schema", None)
    return schema is not None and schema.is_mutable


def is_view_op(name: str) -> bool:
    """Is the op's result a view of its first argument (`expand`, `permute`, `slice`, `view`, ...), as its schema
    says? False for symbolic-size functions and names this torch does not know."""
    try:
        schema = getattr(resolve_op(name), "_schema", None)
    except GraphError:
        return False
    if schema is None or not schema.returns or not schema.arguments:
        return False
    ret, arg = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return ret is not None and arg is not None and not ret.is_write and not arg.is_write


def op_name(target: Any) -> str:
    """The schema name of an FX call target; `GraphError` for targets outside the schema's op set."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    name = _SYM_NAMES.get(target)
    if name is None:
        raise GraphError(f"op {target!r} is not an ATen overload or a known symbolic-size function")
    return name


def is_sym_op(name: str) -> bool:
    return name in SYM_OPS
