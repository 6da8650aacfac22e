"""Names of dtypes in the schema ("float32") and in printed text ("f32"), of layouts and memory formats; and the
numbers a dtype holds, for constants read from files.

Every name from a file is looked up in these fixed tables, never as an attribute of `torch` (a module whose
attribute lookup may import whole subpackages, private compiler packages among them)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch

_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "complex128": torch.complex128,
    "complex64": torch.complex64,
    "complex32": torch.complex32,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "bool": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_SHORT = {
    "float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "complex128": "c128", "complex64": "c64",
    "complex32": "c32", "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "uint16": "u16",
    "uint32": "u32", "uint64": "u64", "bool": "b8",
}

DTYPE_NAMES = tuple(_DTYPES)
SHORT_DTYPE_NAMES: Mapping[str, str] = MappingProxyType(_SHORT)  # schema name → the name printed text uses


def _named(names: str) -> dict[str, Any]:
    """The torch objects of these names that this torch has, looked up once at import from this fixed list."""
    return {name: getattr(torch, name) for name in names.split() if hasattr(torch, name)}


# By schema name (`{"layout": "strided"}`); printed text writes `torch.strided`.
LAYOUTS: Mapping[str, torch.layout] = MappingProxyType(
    _named("strided sparse_coo sparse_csr sparse_csc sparse_bsr sparse_bsc _mkldnn jagged"))
MEMORY_FORMATS: Mapping[str, torch.memory_format] = MappingProxyType(
    _named("contiguous_format channels_last channels_last_3d preserve_format"))


def to_layout(name: str) -> torch.layout:
    try:
        return LAYOUTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown layout {name!r}; known: {', '.join(LAYOUTS)}"[:300]) from None


def to_memory_format(name: str) -> torch.memory_format:
    try:
        return MEMORY_FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown memory format {name!r}; known: {', '.join(MEMORY_FORMATS)}"[:300]) from None


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no name in the ember schema") from None


def to_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_NAMES)}") from None


def short_dtype(name: str) -> str:
    return _SHORT.get(name, name)


# ---------------------------------------------------------------------------------------------- numbers of a dtype

def tensor_of_numbers(items: Sequence[Any], dtype: torch.dtype) -> torch.Tensor:
    """A 1-d tensor of `dtype` holding exactly these numbers; `ValueError` naming the first item it cannot hold:
    a number of the wrong kind (a float for an int dtype, an int for bool), or one outside the dtype's range
    (1e300 as float16 would become inf, 300 as int8 would wrap)."""
    for k, x in enumerate(items):
        problem = fit_problem(x, dtype)
        if problem is not None:
            raise ValueError(f"item {k}: {problem}")
    return torch.tensor(list(items), dtype=dtype) if items else torch.empty(0, dtype=dtype)


def fit_problem(x: Any, dtype: torch.dtype) -> str | None:
    """Why `dtype` cannot hold the number x exactly in kind and range, or None."""
    name = _NAMES.get(dtype, str(dtype))
    if dtype == torch.bool:
        return None if isinstance(x, bool) else f"{x!r} is not a bool"[:200]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return f"{x!r} is not a number"[:200]
    if dtype.is_floating_point or dtype.is_complex:
        return _float_fit(x, dtype, name)
    if not isinstance(x, int):
        return f"{x!r} is not an integer, for {name}"
    info = torch.iinfo(dtype)
    return None if info.min <= x <= info.max else f"{x} lies outside {name}'s range [{info.min}, {info.max}]"


def _float_fit(x: float | int, dtype: torch.dtype, name: str) -> str | None:
    real = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
    info = torch.finfo(real.get(dtype, dtype))
    if math.isnan(x):
        return None
    if math.isinf(x):  # float8_e4m3fn has no infinity (it would saturate)
        return None if dtype != torch.float8_e4m3fn else f"{x} does not exist in {name}"
    return None if abs(x) <= info.max else f"{x!r} lies outside {name}'s range [-{info.max:g}, {info.max:g}]"


def unsupported_tensor(t: torch.Tensor) -> str | None:
    """What kind of tensor ember cannot take as a graph input, said for people (`a quantized tensor (torch.qint8)`),
    or None for the dense, strided tensors a graph's values describe. torch's fake tensors refuse some of these
    with a misleading error, or make ones that fail later (a sparse input read as having its strides changed in
    place), so a frontend asks here first."""
    if t.is_quantized:
        return f"a quantized tensor ({t.dtype})"
    if t.is_nested:
        return "a nested tensor"
    if t.layout is not torch.strided:
        return f"a {'sparse ' if t.is_sparse or 'sparse' in str(t.layout) else ''}tensor of layout {t.layout}"
    return None
