"""Fit the tables of ember's own float32 vector erf and tanh (`ember_codegen_cpp._own_math`) and print them as
Python, or check the prelude's functions against every float32.

[0, 16 w) is cut into 16 intervals of width w (erf: 1/4, erf(x) rounding to 1 in float32 from x = 3.92; tanh: 1/8).
On interval i >= 1 f(x) = b_i + t q_i(t), with t = x - c_i and q_i a polynomial (erf: degree 5, tanh: 4); c_i is a
float32 near the interval's middle whose f is within 1e-4 ulp of a float32, b_i, so that the sum needs no low part
and rounds once (an fma). On interval 0 f(t) = t + t q_0(t): the base is t itself, so small arguments keep their
relative accuracy.

Each q_i is fitted to weighted minimax (Lawson's iteration of least squares) in ulps of the float32 result, its
coefficients rounded to float32 from the lowest up, each rounding followed by a refit of the higher ones.

Needs numpy and mpmath (which torch's sympy brings).
Usage: python tools/fit_vector_math.py erf|tanh > /tmp/tables.py

`--check erf|tanh` instead builds ember's erf or tanh (`_own_math`, g++, the kernels' flags) and compares
it with the double function on every float32 of [0, 4.5) (erf) or [0, 10) (tanh: 1 from 9.01) at 16 and 8 lanes:
the largest error in ulp, how many are not correctly rounded, and whether the two widths agree bit for bit (10-20 s
a function on an AMD Zen 5). Exit status 1 when a result is over one ulp or the widths differ.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import mpmath
import numpy as np

INTERVALS = 16
mpmath.mp.prec = 80


class Spec(NamedTuple):
    exact: Callable  # mpmath's function
    double: Callable  # math's
    width: float  # of each interval
    degree: int  # of t q_i(t)
    top: float  # `--check` covers [0, top)


FUNCTIONS = {"erf": Spec(mpmath.erf, math.erf, 0.25, 6, 4.5), "tanh": Spec(mpmath.tanh, math.tanh, 0.125, 5, 10.0)}


def ulp32(y: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(y).astype(np.float32)).astype(np.float64)


def lawson(basis: np.ndarray, target: np.ndarray, weight: np.ndarray, rounds: int = 80) -> np.ndarray:
    """Coefficients minimizing the largest weighted error, by reweighted least squares."""
    u = np.ones(len(target))
    for _ in range(rounds):
        s = np.sqrt(u) * weight
        coef, *_ = np.linalg.lstsq(basis * s[:, None], target * s, rcond=None)
        u = u * np.abs(basis @ coef - target) * weight
        u /= u.sum()
    return coef


def center(spec: Spec, i: int) -> float:
    """The float32 nearest the middle of interval i (on a grid of 7 ulps) whose f is closest to a float32."""
    mid = np.float32((i + 0.5) * spec.width)
    step = float(np.spacing(mid)) * 7
    best = (1.0, float(mid))
    for k in range(200000):
        c = float(mid) + (k // 2 + 1) * (1 if k % 2 else -1) * step
        e = spec.double(c)
        off = abs(e - float(np.float32(e))) / float(np.spacing(np.float32(e)))
        best = min(best, (off, c))
        if off < 1e-4:
            break
    return best[1]


def fit(spec: Spec, i: int) -> tuple[float, float, list[float], float]:
    width, degree = spec.width, spec.degree
    exact = np.vectorize(lambda v: float(spec.exact(v)))
    if i == 0:
        t = np.concatenate([np.linspace(width * 1e-4, width, 1500), width * np.geomspace(1e-8, 1e-4, 200)])
        c = b = 0.0
        f = exact(t)
        rest = f - t
    else:
        c = center(spec, i)
        t = np.linspace(i * width - c, (i + 1) * width - c, 1500)
        f = exact(c + t)
        b = float(np.float32(float(spec.exact(c))))
        rest = f - b
    weight = 1 / ulp32(f)
    fixed: list[float] = []
    for k in range(1, degree + 1):
        done = sum(v * t ** (j + 1) for j, v in enumerate(fixed))
        basis = np.stack([t ** p for p in range(k, degree + 1)], 1)
        fixed.append(float(np.float32(lawson(basis, rest - done, weight)[0])))
    err = float((np.abs(sum(v * t ** (j + 1) for j, v in enumerate(fixed)) - rest) * weight).max())
    return c, b, fixed, err


CHECK = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
extern "C" V16 f16(V16);
extern "C" V8 f8(V8);
int main() {
  float top = TOP;
  uint32_t end;
  std::memcpy(&end, &top, 4);
  double worst = 0, at = 0;
  long misrounded = 0, differ = 0, n = 0;
  for (uint32_t b = 0; b < end; b += 16) {
    float in[16], wide[16], narrow[16];
    for (int l = 0; l < 16; ++l) { uint32_t u = b + l; std::memcpy(&in[l], &u, 4); }
    V16 x; std::memcpy(&x, in, 64); V16 r = f16(x); std::memcpy(wide, &r, 64);
    for (int h = 0; h < 2; ++h) {
      V8 y; std::memcpy(&y, in + 8 * h, 32); V8 s = f8(y); std::memcpy(narrow + 8 * h, &s, 32);
    }
    for (int l = 0; l < 16; ++l) {
      double exact = std::FN((double)in[l]);
      float rounded = (float)exact;
      int e = rounded == 0 ? -149 : std::max(std::ilogb(rounded) - 23, -149);
      double u = std::fabs((double)wide[l] - exact) / std::ldexp(1.0, e);
      if (u > worst) { worst = u; at = in[l]; }
      misrounded += wide[l] != rounded;
      differ += std::memcmp(&wide[l], &narrow[l], 4) != 0;
      ++n;
    }
  }
  std::printf("%ld float32 values of [0, %g): worst %.4f ulp (at %.9g), %ld not correctly rounded (%.2f%%), "
              "%ld differ between 16 and 8 lanes\n", n, top, worst, at, misrounded, 100.0 * misrounded / n, differ);
  return differ != 0 || worst > 1.0;
}
"""


def check(name: str) -> int:
    from ember_codegen_cpp import _own_math, prelude
    from ember_codegen_cpp._build import FLAGS, machine_flags

    # ember's function itself at both widths, under a name of its own: the prelude's `ember_v<name>` at a width may
    # be another's (8-lane tanh is libmvec's)
    own = getattr(_own_math, f"vector_{name}")
    unit = prelude() + "".join(f'{own(n, "checked")}\nextern "C" ember_f32x{n} f{n}(ember_f32x{n} x) '
                               f'{{ return checked(x); }}\n' for n in (16, 8))
    flags = [f for f in FLAGS + machine_flags("g++") if f not in ("-shared", "-fPIC")]
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "own.cpp").write_text(unit)
        (Path(work) / "check.cpp").write_text(CHECK.replace("TOP", f"{FUNCTIONS[name].top!r}f").replace("FN", name))
        subprocess.run(["g++", *flags, "-c", "own.cpp", "-o", "own.o"], cwd=work, check=True)
        subprocess.run(["g++", "-O2", "-march=native", "check.cpp", "own.o", "-o", "check", "-fopenmp"], cwd=work,
                       check=True)
        return subprocess.run([str(Path(work) / "check")]).returncode


def main() -> None:
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--check" and args[1] in FUNCTIONS:
        sys.exit(check(args[1]))
    if len(args) != 1 or args[0] not in FUNCTIONS:
        sys.exit(f"usage: python tools/fit_vector_math.py [--check] {'|'.join(FUNCTIONS)}")
    spec = FUNCTIONS[args[0]]
    rows = [fit(spec, i) for i in range(INTERVALS)]
    print(f"# largest fitting error per interval, ulp: {', '.join(f'{r[3]:.3f}' for r in rows)}")

    def table(values) -> str:
        return "(" + ", ".join(repr(float(np.float32(v))) for v in values) + ")"

    print(f"CENTERS = {table(r[0] for r in rows)}")
    print(f"BASES = {table(r[1] for r in rows)}")
    print("COEFFICIENTS = (")
    for k in range(spec.degree):
        print(f"    {table(r[2][k] for r in rows)},")
    print(")")


if __name__ == "__main__":
    main()
