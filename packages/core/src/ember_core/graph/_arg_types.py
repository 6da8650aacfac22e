"""Arguments checked against an operator's ATen schema, type by type, as torch would take them when called.

A node's arguments are schema values (`Ref`, `Sym`, numbers, strings, tuples, dtypes ...); each is matched with
its parameter's declared type (`torch._C.FunctionSchema`, read through `real_type`, which keeps `ScalarType`,
`Layout` and `MemoryFormat` apart from int). A `Ref` is matched through what the caller knows of the value it
names (`ValueKind`: its record's type and dtype), so the same check serves graphs (`verify`) and kernel plans.

The rules follow torch's own conversions where ember's schema can express them: a number may stand for a Tensor
(torch wraps it), an int or a bool for a float, a bool for an int; a float never stands for an int, a list never
for a Tensor. A dtype, layout or memory format must be given as one (their ints are not part of ember's schema).
Types ember's schema has no values for (dicts, classes, futures ...) are not checked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._schema import Ref, Sym

# (record type, dtype) of the value a Ref names: ("tensor", "float32"), ("sym", "int64") ...; None when unknown.
ValueKind = Callable[[str], "tuple[str, str] | None"]

_INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"})
_UNCHECKED = frozenset({"AnyType", "ClassType", "DictType", "VarType", "AnyEnumType", "TupleType", "RRefType",
                        "StorageType", "FutureType", "AwaitType", "AnyClassType", "StreamObjType", "UnionType",
                        "QSchemeType", "DimnameType", "CapsuleType", "PyObjectType", "InterfaceType"})


def arguments_problem(op: object, name: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                      kind_of: ValueKind) -> str | None:
    """Why a call of the operator `op` (named `name`) with these arguments is wrong: missing, extra, unknown or
    repeated arguments, or one whose value does not have its parameter's type; None when it is right."""
    if getattr(op, "_schema", None) is None:  # the symbolic-size functions of SYM_OPS: positional arguments only
        return f"{name} takes no keyword arguments" if kwargs else None
    params = _parameters(op)
    return _binding_problem(params, name, args, kwargs) or _type_problem(params, name, args, kwargs, kind_of)


@dataclass(frozen=True)
class _Param:
    """A parameter of a schema, its declared type turned into a test once (`accepts(value, kind_of)`)."""

    name: str
    type_text: str
    keyword_only: bool
    required: bool
    accepts: Callable[[Any, ValueKind], bool]


@functools.cache
def _parameters(op: Any) -> tuple[_Param, ...]:
    return tuple(_Param(a.name, str(a.real_type), a.kwarg_only, not a.has_default_value(),
                        _matcher(a.real_type, getattr(a, "N", None))) for a in op._schema.arguments)


def _binding_problem(params: tuple[_Param, ...], name: str, args: Sequence[Any],
                     kwargs: Mapping[str, Any]) -> str | None:
    positional = [p for p in params if not p.keyword_only]
    if len(args) > len(positional):
        return f"{name} takes at most {len(positional)} positional arguments, got {len(args)}"
    names = {p.name for p in params}
    for key in kwargs:
        if key not in names:
            return f"{name} has no argument named {key!r} (unknown keyword {key!r})"[:300]
    given = {p.name for p in positional[:len(args)]}
    for key in kwargs:
        if key in given:
            return f"{name}: argument {key!r} given both by position and by keyword"
    for p in params:
        if p.required and p.name not in given and p.name not in kwargs:
            return f"{name}: missing argument {p.name!r}"
    return None


def _type_problem(params: tuple[_Param, ...], name: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                  kind_of: ValueKind) -> str | None:
    by_name = {p.name: p for p in params}
    positional = [p for p in params if not p.keyword_only]
    for param, value in [*zip(positional, args), *((by_name[k], v) for k, v in kwargs.items())]:
        if not param.accepts(value, kind_of):
            return f"{name}: argument {param.name!r} expects {param.type_text}, got {_describe(value, kind_of)}"[:400]
    return None


def _matcher(typ: Any, fixed_size: int | None = None) -> Callable[[Any, ValueKind], bool]:
    """The test of a declared type: does a value (with what its Ref names) have it?"""
    kind = typ.kind()
    if kind in _UNCHECKED:
        return lambda value, kind_of: True
    if kind == "OptionalType":
        inner = _matcher(typ.getElementType(), fixed_size)
        return lambda value, kind_of: value is None or _ref_kind(value, kind_of)[0] == "none" or inner(value, kind_of)
    if kind == "ListType":
        item = _matcher(typ.getElementType())
        single = fixed_size is not None  # `int[1] dim` takes a single int too

        def accepts_list(value: Any, kind_of: ValueKind) -> bool:
            if isinstance(value, tuple):
                return all(item(v, kind_of) for v in value)
            return single and item(value, kind_of)
        return accepts_list
    rule = _RULES.get(kind)
    if rule is None:
        return lambda value, kind_of: False
    return lambda value, kind_of: rule(value, _ref_kind(value, kind_of))


def _ref_kind(value: Any, kind_of: ValueKind) -> tuple[str | None, str | None]:
    """(record type, dtype) of the value a Ref names; (None, None) for anything else or an unknown value."""
    if not isinstance(value, Ref):
        return None, None
    return kind_of(value.name) or ("unknown", None)


def _number(value: Any, ref: tuple, ints_only: bool) -> bool:
    if ref[0] == "unknown":
        return True
    if ref[0] in ("sym", "scalar"):
        return not ints_only or ref[1] in _INT_DTYPES
    if isinstance(value, Sym):
        return True
    return isinstance(value, int) or (not ints_only and isinstance(value, float))


def _tensor(value: Any, ref: tuple) -> bool:
    # a Ref to a tensor, or a number (torch wraps it): never a list, a string or a dtype
    return ref[0] in ("tensor", "sym", "scalar", "unknown") or isinstance(value, (bool, int, float, Sym))


# One rule per declared type: does the value (with what its Ref names) have that type?
_RULES: dict[str, Callable[[Any, tuple], bool]] = {
    "TensorType": _tensor,
    "IntType": lambda v, ref: _number(v, ref, ints_only=True),
    "SymIntType": lambda v, ref: _number(v, ref, ints_only=True),
    "FloatType": lambda v, ref: _number(v, ref, ints_only=False),
    "SymFloatType": lambda v, ref: _number(v, ref, ints_only=False),
    "NumberType": lambda v, ref: _number(v, ref, ints_only=False),
    "ComplexType": lambda v, ref: _number(v, ref, ints_only=False),
    "BoolType": lambda v, ref: _number(v, ref, ints_only=True),
    "SymBoolType": lambda v, ref: _number(v, ref, ints_only=True),
    "StringType": lambda v, ref: isinstance(v, str),
    "DeviceObjType": lambda v, ref: isinstance(v, (torch.device, str)),
    "ScalarTypeType": lambda v, ref: isinstance(v, torch.dtype),
    "LayoutType": lambda v, ref: isinstance(v, torch.layout),
    "MemoryFormatType": lambda v, ref: isinstance(v, torch.memory_format),
    "GeneratorType": lambda v, ref: False,  # ember's schema has no generator values (None is the Optional's)
}


def _describe(value: Any, kind_of: ValueKind) -> str:
    if isinstance(value, Ref):
        kind = kind_of(value.name)
        return f"value {value.name!r}" + (f" ({kind[0]} of {kind[1]})" if kind else "")
    if isinstance(value, tuple):
        return f"a list {_short(value)}"
    if isinstance(value, Sym):
        return f"the symbolic int {value.expr!r}"
    return f"{type(value).__name__} {_short(value)}"


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, tuple) else repr(list(value))
    return text if len(text) <= 60 else text[:57] + "..."
