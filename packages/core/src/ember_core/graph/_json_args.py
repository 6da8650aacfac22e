"""Node arguments in the schema's JSON: each a tagged value (`{"ref": "v3"}`, `{"int": 2}`, `{"list": [...]}`),
encoded from and decoded to what a `Node` holds. Decoding checks each value as it goes (integers within int64,
finite-or-named floats, lists nested at most `MAX_ARG_DEPTH`, dtypes, devices and layouts from fixed tables) and
raises `SchemaError` naming the path of the bad field.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._errors import SchemaError
from ._dtypes import dtype_name, to_dtype, to_layout, to_memory_format
from ._expr import ExprError, parse_integer
from ._schema import Ref, Sym

# The tags of argument values, `{"int": 2}`: part of the schema (tests/test_schema_lock.py watches them).
ARG_TAGS = ("ref", "sym", "none", "bool", "int", "float", "str", "list", "dtype", "device", "layout", "memory_format")
MAX_ARG_DEPTH = 32  # `{"list": [...]}` nested deeper than this is refused
INT64 = (-(1 << 63), (1 << 63) - 1)


def encode_arg(arg: Any) -> Any:
    """A tagged JSON value for one argument: `{"ref": "v3"}`, `{"int": 2}`, `{"list": [...]}` ..."""
    if isinstance(arg, Ref):
        return {"ref": arg.name}
    if isinstance(arg, Sym):
        return {"sym": arg.expr}
    if arg is None:
        return {"none": None}
    if isinstance(arg, bool):
        return {"bool": arg}
    if isinstance(arg, int):
        return {"int": arg}
    if isinstance(arg, float):
        return {"float": arg if math.isfinite(arg) else repr(arg)}
    if isinstance(arg, str):
        return {"str": arg}
    if isinstance(arg, (list, tuple)):
        return {"list": [encode_arg(a) for a in arg]}
    if isinstance(arg, torch.dtype):
        return {"dtype": dtype_name(arg)}
    if isinstance(arg, torch.device):
        return {"device": str(arg)}
    if isinstance(arg, torch.layout):
        return {"layout": str(arg).removeprefix("torch.")}
    if isinstance(arg, torch.memory_format):
        return {"memory_format": str(arg).removeprefix("torch.")}
    raise SchemaError("", f"cannot encode argument {arg!r} of type {type(arg).__name__}")


def _decode_float(v: Any, where: str) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if v in ("inf", "-inf", "nan"):
        return float(v)
    raise SchemaError(where, f"expected a number, got {v!r}")


def int_in(v: Any, where: str, low: int, high: int, what: str = "an integer") -> int:
    """v as an int in [low, high]; bools are not ints here."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise SchemaError(where, f"expected {what}, got {v!r}"[:200])
    if not low <= v <= high:
        raise SchemaError(where, f"expected {what} in [{low}, {high}], got {v}")
    return v


def sym_text(v: Any, where: str) -> str:
    """A symbolic expression's text, checked against ember's expression grammar (never evaluated as Python) and
    to have integer values."""
    text = expect(v, str, where)
    try:
        parse_integer(text)
    except ExprError as e:
        raise SchemaError(where, str(e)) from None
    return text


def _decode_tagged(tag: str, v: Any, where: str, depth: int) -> Any:
    if tag == "ref":
        return Ref(expect(v, str, where))
    if tag == "sym":
        return Sym(sym_text(v, where))
    if tag == "none":
        return None
    if tag == "bool":
        return expect(v, bool, where)
    if tag == "int":
        return int_in(v, where, *INT64, "a 64-bit integer")
    if tag == "float":
        return _decode_float(v, where)
    if tag == "str":
        return expect(v, str, where)
    if tag == "list":
        if depth >= MAX_ARG_DEPTH:
            raise SchemaError(where, f"lists nested deeper than {MAX_ARG_DEPTH}")
        return tuple(decode_arg(a, f"{where}[{i}]", depth + 1) for i, a in enumerate(expect(v, list, where)))
    if tag == "dtype":
        try:
            return to_dtype(expect(v, str, where))
        except ValueError as e:
            raise SchemaError(where, str(e)) from None
    if tag == "device":
        try:
            return torch.device(expect(v, str, where))
        except RuntimeError as e:
            raise SchemaError(where, f"unknown device {v!r}: {e}") from None
    if tag in ("layout", "memory_format"):
        try:
            return (to_layout if tag == "layout" else to_memory_format)(expect(v, str, where))
        except ValueError as e:
            raise SchemaError(where, str(e)) from None
    raise SchemaError(where, f"unknown argument tag {tag!r}; tags are {', '.join(ARG_TAGS)}")


def decode_arg(data: Any, where: str = "arg", depth: int = 0) -> Any:
    if not isinstance(data, dict) or len(data) != 1:
        raise SchemaError(where, f"expected a tagged value like {{\"int\": 2}}, got {data!r}"[:200])
    ((tag, v),) = data.items()
    return _decode_tagged(tag, v, where, depth)


def expect(v: Any, typ: type | tuple, where: str) -> Any:
    """v, if it is a `typ` (a bool is not an int here); else a SchemaError naming where."""
    if isinstance(v, bool) and typ is not bool and bool not in (typ if isinstance(typ, tuple) else (typ,)):
        raise SchemaError(where, f"expected {getattr(typ, '__name__', typ)}, got {v!r}")
    if not isinstance(v, typ):
        name = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise SchemaError(where, f"expected {name}, got {type(v).__name__} {v!r}"[:200])
    return v
