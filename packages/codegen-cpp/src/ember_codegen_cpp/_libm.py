"""The libm functions kernels call, and which of them this machine's glibc has in libmvec for every x86 ISA."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from ember_lowering import Op

# libm functions kernels call: name → arity. Each exists as `name` (double) and `name + "f"` (float).
LIBM: dict[str, int] = {
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1, "sin": 1, "cos": 1, "tan": 1,
    "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "erf": 1, "erfc": 1, "lgamma": 1, "fmod": 2, "pow": 2, "atan2": 2,
}

# The loop IR's ops that kernels compute with a libm function (pow aside: an integer pow is ember's own).
LIBM_OPS = frozenset({Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS,
                      Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH, Op.ERF, Op.ERFC, Op.LGAMMA,
                      Op.ATAN2})

# libmvec's x86-64 variants: ISA letter → lanes of float (double has half as many).
_ISA_LANES = {"b": 4, "c": 8, "d": 8, "e": 16}


@functools.cache
def vector_libm() -> frozenset[str]:
    """The libm names (double and float spellings) libmvec provides for every x86 ISA gcc may target."""
    path = ctypes.util.find_library("mvec")
    if path is None:
        return frozenset()
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return frozenset()
    found = set()
    for name, arity in LIBM.items():
        for fname, scale in ((name + "f", 1), (name, 2)):
            args = "v" * arity
            if all(hasattr(lib, f"_ZGV{isa}N{lanes // scale}{args}_{fname}") for isa, lanes in _ISA_LANES.items()):
                found.add(fname)
    return frozenset(found)
