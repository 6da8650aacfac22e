"""Names of dtypes in the schema ("float32") and in printed text ("f32")."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

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


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no name in the ember schema") from None


def to_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_NAMES)}") from None


def short_dtype(name: str) -> str:
    return _SHORT.get(name, name)
