"""Sleef's vector functions, from torch's own libtorch_cpu (ATen's vectorized math is built on them), where libmvec
is less accurate than eager or slower than Sleef at eager's accuracy.

Chosen per function and vector width by accuracy first, then speed (`benchmarks/vector_math.py`, its tables in
benchmarks/README.md; `tests/test_vector_math.py` holds every function to eager's worst ulp):
- Sleef's 1-ulp (u10) functions where glibc's libmvec is less accurate than eager: log (libmvec 4 ulp where the
  result is small), tan (3), and acos, asin, atan, atanh, expm1, log1p, log2 and log10 (2 against eager's 1), and
  its 1.5-ulp erfc (libmvec 2 against eager's 1): all eager's own.
Not Sleef's 3.5-ulp sin and cos with 16 lanes, though they are eager's own and faster than libmvec's (0.17 and 0.18
ns an element against 0.21 and 0.26 on an AMD EPYC with AVX-512): they choose their range reduction by all 16 lanes
at once, so one value's result depends on the values beside it, and a value recomputed elsewhere (the backward
recomputes forward values; a scalar tail computes lane 0 of a splat) can come out an ulp apart
(`tests/test_vector_math.py`, bit for bit in lanes and tail).
Everywhere else libmvec (or ember's own exp, sigmoid, erf and 16-lane tanh: `_own_math.py`) is as accurate as eager
and the fastest that is: 8-lane tanh, sin and cos (2 ulp against eager's 3.5-ulp functions), at worst and in RMS
error (within 1.5x eager's); with 16 lanes, cosh and exp2 as two calls of libmvec's 8-lane function
(`_vector_prelude.IN_HALVES`: its 16-lane tanh is off by an ulp in 38% of [-10, 10], eager's in 0.1%; cosh and
exp2 likewise more often). Exceptions,
2 ulp against eager's 1: asinh, acosh and cosh, whose Sleef functions overflow early (inf from 1.8e19 and from
88.75, where the results are finite).

log and log2 are computed in double by Sleef's 3.5-ulp double functions and rounded once to float32 (`WIDENED`):
correctly rounded but where the exact result lies within a few double ulps of a rounding boundary (none in 22M
positive float32s). Eager's log and log2 are MKL's on an Intel CPU, correctly rounded (an Intel Xeon, family 6 model
207: 0 ulp at worst over the whole range, where Sleef's float32 log is 1), and Sleef's 1-ulp ones elsewhere; a
float32 function would have to be correctly rounded to be as accurate as eager there. The cost, on that Xeon with
16 lanes: 0.87 ns an element against 0.53 for Sleef's float32 log (Sleef's 1-ulp double log: 1.40, libmvec's 0.95).

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

# libm functions whose eager kernels are Sleef's 1-ulp ones and libmvec's are less accurate
_EAGERS_U10 = ("log", "log2", "log10", "tan", "acos", "asin", "atan", "atanh", "expm1", "log1p")
_ISA = {8: "avx2", 16: "avx512f"}
# float32 lanes → libm name → Sleef's function of that width
CHOICES: dict[int, dict[str, str]] = {
    lanes: {f"{name}f": f"Sleef_{name}f{lanes}_u10{isa}" for name in _EAGERS_U10} for lanes, isa in _ISA.items()
}
for lanes, isa in _ISA.items():
    CHOICES[lanes]["erfcf"] = f"Sleef_erfcf{lanes}_u15{isa}"  # eager's erfc: 1.5-ulp bound, 1 ulp measured
# float32 lanes → libm name → Sleef's 3.5-ulp double function over half as many lanes (one register), which the float32
# function calls on each half of its lanes, widened, and rounds (`_vector_prelude`); where torch's library does not
# export it, the float32 function of CHOICES serves
WIDENED: dict[int, dict[str, str]] = {
    lanes: {f"{name}f": f"Sleef_{name}d{lanes // 2}_u35{isa}" for name in ("log", "log2")}
    for lanes, isa in _ISA.items()
}


@functools.cache
def _library() -> Path | None:
    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    return path if path.exists() else None


@functools.cache
def sleef_functions(lanes: int) -> dict[str, str]:
    """The chosen Sleef functions at `lanes` that torch's libtorch_cpu exports: libm name → symbol."""
    return _exported(CHOICES.get(lanes, {}))


@functools.cache
def widened_functions(lanes: int) -> dict[str, str]:
    """The float32 functions at `lanes` computed by a double Sleef function that libtorch_cpu exports: libm name →
    the double function's symbol (`WIDENED`)."""
    return _exported(WIDENED.get(lanes, {}))


def _exported(chosen: dict[str, str]) -> dict[str, str]:
    path = _library()
    if not chosen or path is None:
        return {}
    try:
        lib = ctypes.CDLL(str(path))  # loaded by torch already: this finds it
    except OSError:
        return {}
    return {name: symbol for name, symbol in chosen.items() if hasattr(lib, symbol)}


def link_flags(source: str) -> tuple[str, ...]:
    """Linker flags for a unit: libtorch_cpu when its kernels call a function that Sleef serves, in lanes or in its
    scalar form (a call, not the prelude's definitions: of the vector function, whose parameters are `ember_f32x..`,
    and of the scalar form, whose are `float`, and which calls the vector function on `ember_vsplat`)."""
    names = {name[:-1] for lanes in CHOICES for name in (*sleef_functions(lanes), *widened_functions(lanes))}
    alternatives = "|".join(sorted(names))
    used = names and re.search(rf"ember_v(?:{alternatives})\((?!ember_f|ember_vsplat)|ember_s_(?:{alternatives})f\("
                               rf"(?!float )", source)
    if not used or _library() is None:
        return ()
    folder = str(_library().parent)
    return (f"-L{folder}", "-Wl,--as-needed", "-ltorch_cpu", f"-Wl,-rpath,{folder}")
