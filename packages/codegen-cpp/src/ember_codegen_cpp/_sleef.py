"""Sleef's vector functions, from torch's own libtorch_cpu (ATen's vectorized math is built on them), where they are
faster than glibc's libmvec at an accuracy no worse than eager's.

Chosen per function and vector width by measurement (`benchmarks/vector_math.py`, its table in benchmarks/README.md):
on an AMD EPYC with AVX-512, Sleef's 3.5-ulp sin, cos and log with 16 lanes take 0.17, 0.18 and 0.14 ns an element
where libmvec's take 0.21, 0.26 and 0.24 (2 ulp measured, against libmvec's 2, 2 and 4; eager's own sin and cos are
these very Sleef functions); everywhere else libmvec (or ember's own exp) is faster, so it stays.

A unit that calls one is linked to libtorch_cpu (its directory on the rpath, `--as-needed`); the process has torch
loaded already, so the loader binds the library it has. Where torch's library does not export a chosen function
(another torch build), libmvec serves as before.
"""

from __future__ import annotations

import ctypes
import functools
import re
from pathlib import Path

import torch

# float32 lanes → libm name → Sleef's function of that width
CHOICES: dict[int, dict[str, str]] = {
    16: {"sinf": "Sleef_sinf16_u35avx512f", "cosf": "Sleef_cosf16_u35avx512f", "logf": "Sleef_logf16_u35avx512f"},
}


@functools.cache
def _library() -> Path | None:
    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    return path if path.exists() else None


@functools.cache
def sleef_functions(lanes: int) -> dict[str, str]:
    """The chosen Sleef functions at `lanes` that torch's libtorch_cpu exports: libm name → symbol."""
    chosen = CHOICES.get(lanes, {})
    path = _library()
    if not chosen or path is None:
        return {}
    try:
        lib = ctypes.CDLL(str(path))  # loaded by torch already: this finds it
    except OSError:
        return {}
    return {name: symbol for name, symbol in chosen.items() if hasattr(lib, symbol)}


def link_flags(source: str) -> tuple[str, ...]:
    """Linker flags for a unit: libtorch_cpu when its kernels call a vector function that Sleef serves (a call, not
    the prelude's definition, whose parameters are `ember_f32x..`)."""
    names = {name[:-1] for lanes in CHOICES for name in sleef_functions(lanes)}
    used = names and re.search(rf"ember_v(?:{'|'.join(sorted(names))})\((?!ember_f)", source)
    if not used or _library() is None:
        return ()
    folder = str(_library().parent)
    return (f"-L{folder}", "-Wl,--as-needed", "-ltorch_cpu", f"-Wl,-rpath,{folder}")
