"""Vector math on this CPU: glibc's libmvec against Sleef (inside torch's libtorch_cpu, what ATen's vectorized
functions and so Inductor's kernels call: u10, 1-ulp variants, but u35 for sin and cos; ATen's erf is its own)
for the functions kernels spend their time in, on every vector ISA the CPU runs (AVX2 with 8 lanes, AVX-512 with
16), speed and accuracy side by side.

One C++ program (built here with the system compiler and the flags ember's kernels get: codegen-cpp's `FLAGS` and
`machine_flags`; linked to libmvec and to torch's libtorch_cpu) times each implementation over 64K float32 values in
cache (best of many passes: nanoseconds per element, a single thread) and measures its largest error in units in the
last place against the double-precision <cmath> result rounded to float, over 1M values spread over the function's
whole float32 domain (every exponent, both signs; NaN and infinity excluded), where the exact result is at least 1e-6
in magnitude. gelu's error is not shown: x/2 (1+erf(x/sqrt 2)) cancels for x below about -4 whatever erf is (eager's
formula too); erf's row says how good each erf is. sigmoid and gelu are built from exp and erf as ember's kernels
build them.

Usage: python benchmarks/vector_math.py [--write]   (`--write` replaces this machine's section of README.md)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from _harness import machine, write_section
from ember_codegen_cpp import _own_math, prelude
from ember_codegen_cpp._build import FLAGS, machine_flags, vector_lanes
from ember_codegen_cpp._vector_prelude import IN_HALVES as _IN_HALVES

# function → how its argument is drawn (`all`: the whole float range; `pos`: positive finite) and the double
# reference in C++
FUNCTIONS = {
    "exp": ("all", "std::exp(x)"), "log": ("pos", "std::log(x)"), "sin": ("all", "std::sin(x)"),
    "cos": ("all", "std::cos(x)"), "tanh": ("all", "std::tanh(x)"), "erf": ("all", "std::erf(x)"),
    "sigmoid": ("all", "1.0 / (1.0 + std::exp(-x))"), "gelu": ("all", "0.5 * x * (1.0 + std::erf(x * M_SQRT1_2))"),
}
# composite → (the function it calls, its lanes expression with V the vector call)
COMPOSITES = {"sigmoid": "exp", "gelu": "erf"}
# the vector ISAs this CPU runs: (vector type, lanes, libmvec's ISA letter, Sleef's suffix); AVX-512 where kernels
# get 16 lanes (an AVX2-only CPU cannot run its code, nor compile it with -march=native)
_ALL_ISAS = {"avx2": ("__m256", 8, "d", "avx2"), "avx512": ("__m512", 16, "e", "avx512f")}
ISAS = {isa: spec for isa, spec in _ALL_ISAS.items() if spec[1] in vector_lanes()}
IMPLS = ("libmvec", "libmvec_2x8", "sleef_u10", "sleef_u35", "ember")
U35 = {"sin", "cos", "log", "tanh"}  # Sleef's 3.5-ulp variants (ATen's sin and cos are these)
# with AVX-512, libmvec's 8-lane function called on each half of 16 lanes: what 16-lane kernels do for the functions
# whose 16-lane libmvec function is less accurate (and for the composites built on them)
# (and erf and tanh, which they called so before ember had its own)
IN_HALVES = {name[:-1] for name in _IN_HALVES.get(16, ())} | {"erf", "tanh"}
# ember's own vector functions (its C++ prelude), as expressions of x
# (erf and tanh under names of their own: at a width where the prelude's `ember_vtanh` is libmvec's, ember's is
# measured still)
OWN = {"exp": "ember_vexpf(x)", "sigmoid": "ember_vsigmoidf(x)", "erf": "ember_bench_own_erf(x)",
       "tanh": "ember_bench_own_tanh(x)", "gelu": "x * 0.5f * (1.0f + ember_bench_own_erf(x * 0.70710678118654752f))"}

PROGRAM = r"""
#include <immintrin.h>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

extern "C" {
%(decls)s
}

template <__m256 (*F)(__m256)> static __m512 in_halves(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(F(lo))),
                                             _mm256_castps_pd(F(hi)), 1));
}

static float from_bits(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
static int64_t ordered(float f) { int32_t i; std::memcpy(&i, &f, 4); return i < 0 ? (int64_t)INT32_MIN - i : i; }

static double ulps(float got, double want) {
  float w = (float)want;
  if (std::isnan(w) || std::isnan(got)) return (std::isnan(w) && std::isnan(got)) ? 0 : 1e9;
  if (std::isinf(w) || std::isinf(got)) return got == w ? 0 : 1e9;
  return (double)std::llabs(ordered(got) - ordered(w));
}

template <class V, int L, class F> static double nanoseconds(F f, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  double best = 1e30;
  for (int rep = 0; rep < 60; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int pass = 0; pass < 8; ++pass)
      for (size_t i = 0; i < x.size(); i += L) {
        V v; std::memcpy(&v, &x[i], sizeof v);
        V r = f(v);
        std::memcpy(&y[i], &r, sizeof r);
      }
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ns / (8.0 * x.size()));
  }
  volatile float sink = y[x.size() / 2]; (void)sink;
  return best;
}

template <class V, int L, class F, class R> static double worst(F f, R ref, bool positive) {
  double w = 0;
  const uint32_t n = 1u << 20;
  for (uint32_t k = 0; k < n; k += L) {
    float in[L], out[L];
    for (int l = 0; l < L; ++l) {
      uint32_t bits = (uint32_t)((uint64_t)(k + l) * (0x100000000ull / n)) + 12345u;
      if (positive) bits &= 0x7fffffffu;
      float v = from_bits(bits);
      in[l] = std::isfinite(v) ? v : 1.0f;
    }
    V v; std::memcpy(&v, in, sizeof v);
    V r = f(v);
    std::memcpy(out, &r, sizeof r);
    for (int l = 0; l < L; ++l) {
      double want = ref((double)in[l]);
      if (std::fabs(want) >= 1e-6 || !std::isfinite(want)) w = std::max(w, ulps(out[l], want));
    }
  }
  return w;
}

// The root mean square of the distance from the exact result in float32 ulps at it, over 1M values evenly spread
// over [-10, 10] (positive: (0, 10]), where most arguments are: a correctly rounded function scores 0.289.
template <class V, int L, class F, class R> static double rms(F f, R ref, bool positive) {
  double sum = 0;
  size_t count = 0;
  const uint32_t n = 1u << 20;
  for (uint32_t k = 0; k < n; k += L) {
    float in[L], out[L];
    for (int l = 0; l < L; ++l)
      in[l] = positive ? (float)((k + l + 1) * (10.0 / n)) : (float)((k + l) * (20.0 / n) - 10.0);
    V v; std::memcpy(&v, in, sizeof v);
    V r = f(v);
    std::memcpy(out, &r, sizeof r);
    for (int l = 0; l < L; ++l) {
      double want = ref((double)in[l]);
      float w = std::fabs((float)want);
      if (!(w >= 1.2e-38f) || std::isinf(w)) continue;
      double ulp = (double)std::nextafter(w, INFINITY) - (double)w, e = ((double)out[l] - want) / ulp;
      sum += e * e;
      ++count;
    }
  }
  return std::sqrt(sum / count);
}

int main() {
  std::vector<float> x(1 << 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((double)i / x.size() * 16.0 - 8.0);
  std::vector<float> pos(x.size());
  for (size_t i = 0; i < x.size(); ++i) pos[i] = std::fabs(x[i]) + 1e-3f;
%(body)s
  return 0;
}
"""


def own_name(fn: str, lanes: int) -> str:
    return f"ember_bench_{fn}{lanes}"


def own_unit() -> str:
    """ember's prelude and a called (not inlined) entry per own function and lane count, in a unit of its own: the
    prelude declares its own basic types, which the standard headers would clash with. Out of line, as libmvec's and
    Sleef's are (in a kernel ember's are inlined)."""
    widths = [lanes for lanes in vector_lanes() if lanes in (8, 16)]
    own = [f(lanes, f"ember_bench_own_{fn}") for lanes in widths
           for fn, f in (("erf", _own_math.vector_erf), ("tanh", _own_math.vector_tanh))]
    entries = [f'extern "C" ember_f32x{lanes} {own_name(fn, lanes)}(ember_f32x{lanes} x) {{ return {call}; }}'
               for fn, call in OWN.items() for lanes in widths]
    return prelude() + "\n" + "\n".join(own + entries) + "\n"


def vector_call(impl: str, isa: str, fn: str) -> str:
    _, lanes, letter, suffix = ISAS[isa]
    if impl == "libmvec":
        return f"_ZGV{letter}N{lanes}v_{fn}f"
    return f"Sleef_{fn}f{lanes}_{impl.split('_')[1]}{suffix}"


def lane_expr(fn: str, call: str, isa: str) -> str:
    """The C++ lambda body computing `fn` over a vector `v` with `call` (its own function or the composite's)."""
    vtype, lanes, _, _ = ISAS[isa]
    ps = "_mm512" if lanes == 16 else "_mm256"
    one, half = f"{ps}_set1_ps(1.0f)", f"{ps}_set1_ps(0.5f)"
    if fn == "sigmoid":
        neg = f"{ps}_sub_ps({ps}_setzero_ps(), v)"
        return f"{ps}_div_ps({one}, {ps}_add_ps({one}, {call}({neg})))"
    if fn == "gelu":
        scaled = f"{ps}_mul_ps(v, {ps}_set1_ps(0.70710678118654752f))"
        return f"{ps}_mul_ps({ps}_mul_ps(v, {half}), {ps}_add_ps({one}, {call}({scaled})))"
    return f"{call}(v)"


def program() -> str:
    decls, body = set(), []
    for isa, (vtype, lanes, _, _) in ISAS.items():
        for fn, (domain, ref) in FUNCTIONS.items():
            base = COMPOSITES.get(fn, fn)
            for impl in IMPLS:
                if impl == "sleef_u35" and fn not in U35:
                    continue
                if impl == "libmvec_2x8" and (base not in IN_HALVES or lanes != 16):
                    continue
                if impl == "ember":
                    if fn not in OWN or lanes not in vector_lanes():
                        continue
                    call = own_name(fn, lanes)
                    decls.add(f"{vtype} {call}({vtype});")
                    lam = f"[](const {vtype}& v) {{ return {call}(v); }}"
                elif impl == "libmvec_2x8":
                    half = vector_call("libmvec", "avx2", base)
                    decls.add(f"__m256 {half}(__m256);")
                    lam = f"[](const {vtype}& v) {{ return {lane_expr(fn, f'in_halves<{half}>', isa)}; }}"
                else:
                    call = vector_call(impl, isa, base)
                    decls.add(f"{vtype} {call}({vtype});")
                    lam = f"[](const {vtype}& v) {{ return {lane_expr(fn, call, isa)}; }}"
                data = "pos" if domain == "pos" else "x"
                positive = str(domain == "pos").lower()
                reference = f"[](double x) {{ return {ref}; }}"
                accuracy = "-1.0, r = -1.0" if fn == "gelu" else \
                    (f"worst<{vtype}, {lanes}>(f, {reference}, {positive}), "
                     f"r = rms<{vtype}, {lanes}>(f, {reference}, {positive})")
                body.append(f"  {{ auto f = {lam}; double ns = nanoseconds<{vtype}, {lanes}>(f, {data}); "
                            f'double u = {accuracy}; std::printf("{isa} {fn} {impl} %.4f %.1f %.3f\\n", ns, u, r); }}')
    return PROGRAM % {"decls": "\n".join(sorted(decls)), "body": "\n".join(body)}


def run() -> dict[tuple[str, str, str], tuple[float, float]]:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        sys.exit("vector_math.py: no C++ compiler (set CXX)")
    lib = Path(torch.__file__).parent / "lib"
    work = Path(tempfile.mkdtemp(prefix="ember-vector-math-"))
    try:
        (work / "bench.cpp").write_text(program())
        (work / "own.cpp").write_text(own_unit())
        flags = [f for f in FLAGS + machine_flags(cxx) if f not in ("-shared", "-fPIC")]
        cmd = [cxx, *flags, str(work / "bench.cpp"), str(work / "own.cpp"), "-o", str(work / "bench"),
               f"-L{lib}", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}", "-lmvec", "-lm"]
        subprocess.run(cmd, check=True)
        out = subprocess.run([str(work / "bench")], check=True, capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {}
    for line in out.splitlines():
        isa, fn, impl, ns, ulp, rms = line.split()
        results[(isa, fn, impl)] = (float(ns), float(ulp), float(rms))
    return results


def report(results: dict) -> str:
    lines = [f"`python benchmarks/vector_math.py` on {machine()}, torch {torch.__version__} (its Sleef), glibc's "
             "libmvec: nanoseconds per float32 element, one thread, 64K values in cache (best of 60); in "
             "parentheses the largest error in ulp against <cmath> in double over 1M values across the float32 "
             "domain where the result is at least 1e-6 in magnitude, and the RMS error in ulp over 1M values "
             "evenly spread over [-10, 10] ((0, 10] for log; correctly rounded: 0.289; gelu's: see the script). "
             "sigmoid = "
             "1/(1+exp(-x)), gelu = x/2 (1+erf(x/sqrt 2)) built on each exp and erf.", "",
             "| ISA | function | libmvec ns | libmvec 2x8 ns | Sleef u10 ns | Sleef u35 ns | ember's own ns | "
             "fastest (next / it) |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    names = {"libmvec": "libmvec", "libmvec_2x8": "libmvec 2x8", "sleef_u10": "Sleef u10", "sleef_u35": "Sleef u35",
             "ember": "ember"}
    for isa in ISAS:
        for fn in FUNCTIONS:
            cells = {impl: results[(isa, fn, impl)] for impl in IMPLS if (isa, fn, impl) in results}
            shown = [f"{cells[i][0]:.3f}" + (f" ({cells[i][1]:g}; {cells[i][2]:.2f})" if cells[i][1] >= 0 else "")
                     if i in cells else "–" for i in IMPLS]
            ranked = sorted(cells, key=lambda i: cells[i][0])
            ratio = cells[ranked[1]][0] / cells[ranked[0]][0]
            lines.append(f"| {isa} | {fn} | {' | '.join(shown)} | {names[ranked[0]]} ({ratio:.2f}x) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    text = report(run())
    print(text)
    if args.write:
        write_section(Path(__file__).with_name("README.md"), f"## Vector math on {machine()}", text)


if __name__ == "__main__":
    main()
