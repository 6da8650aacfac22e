"""The prelude's vector layer (`_prelude.py` puts it after the scalar helpers): GCC vector types at each lane
count the CPU has (`ember_f32x16`), their loads, stores, conversions and selects, ember's own exp and sigmoid over
lanes (bit for bit the scalar `ember_expf`), and every libm function over lanes: libmvec's variant by its vector-ABI
name where glibc has it, the scalar function lane by lane where it does not."""

from __future__ import annotations

import string

from . import _own_math
from ._libm import LIBM, vector_libm
from ._sleef import sleef_functions, widened_functions

_VECTOR_TYPES = """
typedef float ember_f32x$L __attribute__((vector_size(4 * $L)));
typedef double ember_f64x$L __attribute__((vector_size(8 * $L)));
typedef double ember_f64h$L __attribute__((vector_size(4 * $L)));  // L/2 doubles: one register
typedef int64_t ember_i64x$L __attribute__((vector_size(8 * $L)));
typedef int32_t ember_i32x$L __attribute__((vector_size(4 * $L)));
typedef int16_t ember_i16x$L __attribute__((vector_size(2 * $L)));
typedef int8_t ember_i8x$L __attribute__((vector_size($L)));
typedef uint64_t ember_u64x$L __attribute__((vector_size(8 * $L)));
typedef uint32_t ember_u32x$L __attribute__((vector_size(4 * $L)));
typedef uint16_t ember_u16x$L __attribute__((vector_size(2 * $L)));
typedef uint8_t ember_u8x$L __attribute__((vector_size($L)));
"""

# What does not depend on the length: templates over any vector type.
VECTOR_GENERIC = r"""
// Unaligned loads and stores (one vmovups), a scalar in every lane, and `m ? a : b` lane by lane for a mask of
// any width.
template <typename V, typename T> EMBER_INLINE V ember_vload(const T* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <typename T, typename V> EMBER_INLINE void ember_vstore(T* p, V v) { __builtin_memcpy(p, &v, sizeof v); }
// s in every lane. As scalar minus a zero vector (exact for every value, -0 and NaN included; gcc folds it to one
// broadcast): a store into each lane became a chain of 16 masked broadcasts where the value was not constant.
template <typename V, typename S> EMBER_INLINE V ember_vsplat(S s) {
  typedef __typeof__(((V*)0)[0][0]) T;
  return (T)s - (V){};
}
template <typename V> EMBER_INLINE V ember_viota() {  // 0, 1, 2, ... in the lanes
  V v;
  for (unsigned l = 0; l < sizeof(V) / sizeof(v[0]); ++l) v[l] = l;
  return v;
}
// 64-bit lanes span two registers, and gcc compares such vectors (or selects by a mask converted to their width)
// one scalar lane at a time: 16 int64 compares of a cat's index cost 30x a float32 compare. So the mask work on them
// runs half a vector (one register) at a time.
template <int... I> struct ember_seq {};
template <int N, int... I> struct ember_count : ember_count<N - 1, N - 1, I...> {};
template <int... I> struct ember_count<0, I...> { typedef ember_seq<I...> type; };
template <typename V> struct ember_halves {
  typedef __typeof__(((V*)0)[0][0]) T;
  typedef T H __attribute__((vector_size(sizeof(V) / 2)));
  enum { N = sizeof(V) / sizeof(T) / 2 };
};
// lanes OFF.. of v, and a ++ b: register moves (gcc's shufflevector), not trips through memory
template <int OFF, typename V, int... I> EMBER_INLINE auto ember_take(V v, ember_seq<I...>) {
  return __builtin_shufflevector(v, v, (OFF + I)...);
}
template <typename H, int... I> EMBER_INLINE auto ember_cat(H a, H b, ember_seq<I...>) {
  return __builtin_shufflevector(a, b, I...);
}
template <typename V> EMBER_INLINE void ember_split(const V& v, typename ember_halves<V>::H* h) {
  typedef typename ember_count<ember_halves<V>::N>::type S;
  h[0] = ember_take<0>(v, S());
  h[1] = ember_take<ember_halves<V>::N>(v, S());
}
template <typename V> EMBER_INLINE V ember_join(const typename ember_halves<V>::H* h) {
  return ember_cat(h[0], h[1], typename ember_count<2 * ember_halves<V>::N>::type());
}
// 16-bit lanes h as the high halves of 32-bit lanes, the low halves zero (the bits of `(u32)h << 16`, a bfloat16's
// float32): one permute, where gcc widens the lanes a half vector at a time (four instructions and a shift)
template <typename H, int... I> EMBER_INLINE auto ember_high_halves(H h, ember_seq<I...>) {
  return __builtin_shufflevector((H){}, h, ((I & 1) ? (int)(sizeof(H) / 2) + (I >> 1) : 0)...);
}
// Are a mask's lanes (-1 or 0) all set / all clear? Folded half on half (vector ANDs/ORs, one lane read at the end):
// a loop over the lanes would read each lane out of the register.
template <typename M> EMBER_INLINE bool ember_vall(M m) {
  if constexpr (sizeof(M) > sizeof(m[0])) {
    typename ember_halves<M>::H h[2];
    ember_split(m, h);
    return ember_vall(h[0] & h[1]);
  } else {
    return m[0] != 0;
  }
}
template <typename M> EMBER_INLINE bool ember_vnone(M m) {
  if constexpr (sizeof(M) > sizeof(m[0])) {
    typename ember_halves<M>::H h[2];
    ember_split(m, h);
    return ember_vnone(h[0] | h[1]);
  } else {
    return m[0] == 0;
  }
}
template <typename M, typename V> EMBER_INLINE V ember_vsel(M m, V a, V b) {
  if constexpr (sizeof(V) == 2 * sizeof(M) && sizeof(a[0]) == 8) {
    typename ember_halves<V>::H x[2], y[2], r[2];
    typename ember_halves<M>::H n[2];
    ember_split(a, x), ember_split(b, y), ember_split(m, n);
    for (int h = 0; h < 2; ++h) r[h] = __builtin_convertvector(n[h], __typeof__(x[h] < y[h])) ? x[h] : y[h];
    return ember_join<V>(r);
  } else {
    return __builtin_convertvector(m, __typeof__(a < b)) ? a : b;
  }
}
// a comparison of 64-bit lanes as an int32 mask M; OP: 0 ==, 1 !=, 2 <, 3 <=, 4 >, 5 >=
template <int OP, typename M, typename V> EMBER_INLINE M ember_vcmp_wide(V a, V b) {
  typename ember_halves<V>::H x[2], y[2];
  typename ember_halves<M>::H m[2];
  typedef typename ember_halves<M>::H MH;
  ember_split(a, x), ember_split(b, y);
  for (int h = 0; h < 2; ++h) {
    if constexpr (OP == 0) m[h] = __builtin_convertvector(x[h] == y[h], MH);
    else if constexpr (OP == 1) m[h] = __builtin_convertvector(x[h] != y[h], MH);
    else if constexpr (OP == 2) m[h] = __builtin_convertvector(x[h] < y[h], MH);
    else if constexpr (OP == 3) m[h] = __builtin_convertvector(x[h] <= y[h], MH);
    else if constexpr (OP == 4) m[h] = __builtin_convertvector(x[h] > y[h], MH);
    else m[h] = __builtin_convertvector(x[h] >= y[h], MH);
  }
  return ember_join<M>(m);
}
// max/min: NaN wins, as the scalar ember_max.
template <typename V> EMBER_INLINE V ember_vmax(V a, V b) { return ((a > b) | (a != a)) ? a : b; }
template <typename V> EMBER_INLINE V ember_vmin(V a, V b) { return ((a < b) | (a != a)) ? a : b; }
// An accumulator's N lanes a[0..N) combined pairwise by f, half onto half (a[l] = f(a[l], a[l + N/2]) for l < N/2,
// then N/4, ... 1), as vectors in registers: the same tree as a loop over halving spans, which gcc left as scalar
// loads and stores through the stack, some hundred cycles at the end of each row.
template <typename V, typename F> EMBER_INLINE auto ember_fold_halves(V v, F f) {
  if constexpr (sizeof(V) == sizeof(v[0])) {
    return v[0];
  } else {
    typename ember_halves<V>::H h[2];
    ember_split(v, h);
    return ember_fold_halves(f(h[0], h[1]), f);
  }
}
template <int N, typename T, typename F> EMBER_INLINE T ember_fold(const T* a, F f) {
  typedef T V __attribute__((vector_size(N * sizeof(T))));
  return ember_fold_halves(ember_vload<V>(a), f);
}
"""

_VECTOR_HELPERS = r"""
EMBER_INLINE ember_f32x$L ember_vabs(ember_f32x$L a) { return (ember_f32x$L)((ember_u32x$L)a & 0x7FFFFFFFu); }
EMBER_INLINE ember_f64x$L ember_vabs(ember_f64x$L a) {
  return (ember_f64x$L)((ember_u64x$L)a & 0x7FFFFFFFFFFFFFFFull);
}
EMBER_INLINE ember_f32x$L ember_vcopysign(ember_f32x$L a, ember_f32x$L b) {
  return (ember_f32x$L)(((ember_u32x$L)a & 0x7FFFFFFFu) | ((ember_u32x$L)b & 0x80000000u));
}
EMBER_INLINE ember_f64x$L ember_vcopysign(ember_f64x$L a, ember_f64x$L b) {
  return (ember_f64x$L)(((ember_u64x$L)a & 0x7FFFFFFFFFFFFFFFull) | ((ember_u64x$L)b & 0x8000000000000000ull));
}
// One instruction per vector where the ISA has it (vsqrtps, vrndscaleps, vfmadd): gcc turns these lane loops
// into it, and into a call per lane where it has none.
#define EMBER_LANEWISE(name, T, V, call) \
  EMBER_INLINE V name(V a) { V r; for (int l = 0; l < $L; ++l) r[l] = call(a[l]); return r; }
EMBER_LANEWISE(ember_vsqrt, float, ember_f32x$L, __builtin_sqrtf)
EMBER_LANEWISE(ember_vsqrt, double, ember_f64x$L, __builtin_sqrt)
EMBER_LANEWISE(ember_vfloor, float, ember_f32x$L, __builtin_floorf)
EMBER_LANEWISE(ember_vfloor, double, ember_f64x$L, __builtin_floor)
EMBER_LANEWISE(ember_vceil, float, ember_f32x$L, __builtin_ceilf)
EMBER_LANEWISE(ember_vceil, double, ember_f64x$L, __builtin_ceil)
EMBER_LANEWISE(ember_vrint, float, ember_f32x$L, __builtin_rintf)
EMBER_LANEWISE(ember_vrint, double, ember_f64x$L, __builtin_rint)
EMBER_LANEWISE(ember_vtrunc, float, ember_f32x$L, __builtin_truncf)
EMBER_LANEWISE(ember_vtrunc, double, ember_f64x$L, __builtin_trunc)
#undef EMBER_LANEWISE
EMBER_INLINE ember_f32x$L ember_vfma(ember_f32x$L a, ember_f32x$L b, ember_f32x$L c) {
  ember_f32x$L r; for (int l = 0; l < $L; ++l) r[l] = __builtin_fmaf(a[l], b[l], c[l]); return r;
}

// bfloat16 and float16 in memory (uint16 lanes) to and from float32 lanes, bit for bit the scalar helpers.
EMBER_INLINE ember_f32x$L ember_vload_bf16(ember_u16x$L h) {
  return (ember_f32x$L)ember_high_halves(h, ember_count<2 * $L>::type());
}
EMBER_INLINE ember_u16x$L ember_vstore_bf16(ember_f32x$L f) {
  const ember_u32x$L u = (ember_u32x$L)f, r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return __builtin_convertvector(f != f ? (ember_u32x$L){} + 0x7FC0u : r, ember_u16x$L);
}
// rounded to bfloat16 and back, in 32-bit lanes: the same bits as a store and a load, without narrowing the lanes to
// 16 bits and widening them again (a fused chain of bf16 ops rounds after every op, as eager does)
EMBER_INLINE ember_f32x$L ember_vround_bf16(ember_f32x$L f) {
  const ember_u32x$L u = (ember_u32x$L)f, r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return (ember_f32x$L)(f != f ? (ember_u32x$L){} + 0x7FC00000u : r);
}
EMBER_INLINE ember_f32x$L ember_vload_f16(ember_u16x$L h) {
  const ember_u32x$L w = (ember_u32x$L)ember_high_halves(h, ember_count<2 * $L>::type()), sign = w & 0x80000000u;
  const ember_u32x$L two_w = w + w;
  const ember_f32x$L normalized = (ember_f32x$L)((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const ember_f32x$L denormalized = (ember_f32x$L)((two_w >> 17) | (126u << 23)) - 0.5f;
  return (ember_f32x$L)(sign | (two_w < (1u << 27) ? (ember_u32x$L)denormalized : (ember_u32x$L)normalized));
}
EMBER_INLINE ember_u16x$L ember_vstore_f16(ember_f32x$L f) {
  ember_f32x$L base = (ember_vabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const ember_u32x$L w = (ember_u32x$L)f, shl1_w = w + w, sign = w & 0x80000000u;
  ember_u32x$L bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? (ember_u32x$L){} + 0x71000000u : bias;
  base = (ember_f32x$L)((bias >> 1) + 0x07800000u) + base;
  const ember_u32x$L bits = (ember_u32x$L)base;
  const ember_u32x$L nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return __builtin_convertvector((sign >> 16) | (shl1_w > 0xFF000000u ? (ember_u32x$L){} + 0x7E00u : nonsign),
                                 ember_u16x$L);
}
EMBER_INLINE ember_f32x$L ember_vround_f16(ember_f32x$L f) { return ember_vload_f16(ember_vstore_f16(f)); }

// ember_expf over lanes: the same reduction, polynomial and fma steps, so a vector lane and the scalar tail agree
// bit for bit.
EMBER_INLINE ember_f32x$L ember_vexpf(ember_f32x$L x) {
  const ember_f32x$L zero = {};
  x = x < -104.0f ? zero - 104.0f : x;
  x = x > 89.0f ? zero + 89.0f : x;
  const ember_f32x$L z = ember_vrint(x * 1.44269504088896341f);
  ember_f32x$L r = ember_vfma(z, zero - 0.693359375f, x);
  r = ember_vfma(z, zero + 2.12194440e-4f, r);
  ember_f32x$L p = zero + 1.9875691500E-4f;
  p = ember_vfma(p, r, zero + 1.3981999507E-3f);
  p = ember_vfma(p, r, zero + 8.3334519073E-3f);
  p = ember_vfma(p, r, zero + 4.1665795894E-2f);
  p = ember_vfma(p, r, zero + 1.6666665459E-1f);
  p = ember_vfma(p, r, zero + 5.0000001201E-1f);
  p = ember_vfma(p, r * r, r) + 1.0f;
$SCALE_BY_POW2
}
EMBER_INLINE ember_f32x$L ember_vsigmoidf(ember_f32x$L x) { return 1.0f / (1.0f + ember_vexpf(-x)); }
"""

# Vector ABI letters of libmvec's x86-64 variants by float32 lanes: SSE4 (4), AVX2 (8), AVX-512 (16).
_ISA_BY_LANES = {4: "b", 8: "d", 16: "e"}
# lanes → libmvec functions computed as two calls of their variant of half the lanes, where glibc's 16-lane
# function is less accurate than its 8-lane one: tanhf, coshf and exp2f (as close at worst, but off by an ulp far
# more often: in [-10, 10] tanhf's RMS error is 0.45 ulp against 0.29 for the 8-lane one and 0.28 for eager's, and
# a gradient through it came out 5x as far from float64's as eager's). Two 8-lane calls cost more (AMD EPYC Zen 5,
# `benchmarks/vector_math.py`, "libmvec 2x8": tanh 0.55 ns an element against 0.19); ember's own tanh serves 16
# lanes now (0.38 ns; with 8 lanes libmvec's is faster, 0.53 against 0.71, and as accurate).
IN_HALVES: dict[int, frozenset[str]] = {16: frozenset({"coshf", "exp2f"})}
# float32 libm functions ember computes itself: name → (the lanes it serves, its C++ at those lanes)
OWN = {"erff": (_own_math.LANES, _own_math.vector_erf), "tanhf": ((16,), _own_math.vector_tanh)}


def _float_implementation(fname: str, lanes: int, simd: frozenset[str]) -> str:
    """Which function `ember_v<name>` of float32 lanes calls at `lanes`: "own" (ember's, `OWN`), "widened" (Sleef's
    double function on each half, widened, rounded once), "sleef", "halves" (libmvec's variant of half the lanes,
    twice), "libmvec", or "scalar" (the libm function lane by lane)."""
    own_lanes, _ = OWN.get(fname, ((), None))
    if lanes in own_lanes:
        return "own"
    if fname in widened_functions(lanes):
        return "widened"
    if fname in sleef_functions(lanes):
        return "sleef"
    if fname in simd and fname in IN_HALVES.get(lanes, ()):
        return "halves"
    if fname in simd and lanes in _ISA_BY_LANES:
        return "libmvec"
    return "scalar"


def vector_only(lanes: int) -> frozenset[str]:
    """The float32 libm functions (`tanhf`, ...) whose vector form at `lanes` is not the scalar function lane by lane
    (ember's own, libmvec's or Sleef's: a few ulp apart from glibc's scalar one). Scalar code calls them as
    `ember_s_<fname>` (`scalar_layer`), so that a value has the same bits in a loop's lanes, in its scalar tail and
    in a kernel with other loops: the partitioner recomputes forward values in the backward, and a max's gradient
    compares them with the max the forward saved."""
    simd = vector_libm()
    return frozenset(f"{name}f" for name in LIBM if _float_implementation(f"{name}f", lanes, simd) != "scalar")


def scalar_layer(lanes: int) -> str:
    """`ember_s_<fname>` for each function of `vector_only(lanes)`: lane 0 of the vector function at `lanes` on the
    value put in every lane (a tail has at most lanes - 1 elements; one vector call costs about what glibc's scalar
    call does)."""
    out = []
    for fname in sorted(vector_only(lanes)):
        arity = LIBM[fname[:-1]]
        params = ", ".join(f"float {a}" for a in "ab"[:arity])
        splats = ", ".join(f"ember_vsplat<ember_f32x{lanes}>({a})" for a in "ab"[:arity])
        out.append(f"EMBER_INLINE float ember_s_{fname}({params}) {{ return ember_v{fname[:-1]}({splats})[0]; }}")
    return "\n".join(out) + "\n"


def _vector_libm(lanes: int, simd: frozenset[str]) -> str:
    """`ember_v<name>` for every libm function and both float widths at `lanes`: float32 is ember's own where it
    has one (`OWN`: erf at 8 and 16 lanes, tanh at 16), else calls Sleef's function where libmvec's is less accurate
    than eager's or slower (`_sleef.py`), else libmvec's variant of that width by its vector-ABI name where glibc has
    it (`_ZGVeN16v_sinf`, glibc's stated bound: 4 ulp), or its variant of half the lanes twice (`IN_HALVES`); any
    other runs the scalar function lane by lane."""
    out = [_own_math.lookup(lanes)] if any(lanes in own_lanes for own_lanes, _ in OWN.values()) else []
    for name, arity in LIBM.items():
        params = ", ".join(f"V {a}" for a in "ab"[:arity])
        for fname, ctype, vt in ((name + "f", "float", "ember_f32x$L"), (name, "double", "ember_f64x$L")):
            head = f"EMBER_INLINE {vt} ember_v{name}({params.replace('V ', vt + ' ')})"
            how = _float_implementation(fname, lanes, simd) if ctype == "float" else "scalar"
            if how == "own":
                out.append(OWN[fname][1](lanes))
            elif how == "widened":
                wide, half = "ember_f64h$L", "ember_halves<ember_f32x$L>::H"
                sleef = widened_functions(lanes)[fname]
                out.append(f'extern "C" {wide} {sleef}({wide});')
                out.append(f"{head} {{ {half} h[2], r[2]; ember_split(a, h); for (int k = 0; k < 2; ++k) r[k] = "
                           f"__builtin_convertvector({sleef}(__builtin_convertvector(h[k], {wide})), {half}); "
                           f"return ember_join<{vt}>(r); }}")
            elif how == "sleef":
                sleef = sleef_functions(lanes)[fname]
                out.append(f'extern "C" {vt} {sleef}({", ".join([vt] * arity)});')
                out.append(f"{head} {{ return {sleef}({', '.join('ab'[:arity])}); }}")
            elif how == "halves":
                half, mangled = "ember_halves<ember_f32x$L>::H", f"_ZGV{_ISA_BY_LANES[lanes // 2]}N{lanes // 2}"
                mangled += f"{'v' * arity}_{fname}"
                out.append(f'extern "C" {half} {mangled}({", ".join([half] * arity)});')
                splits = "".join(f" {half} {a}h[2]; ember_split({a}, {a}h);" for a in "ab"[:arity])
                calls = " ".join(f"r[{h}] = {mangled}({', '.join(f'{a}h[{h}]' for a in 'ab'[:arity])});"
                                 for h in (0, 1))
                out.append(f"{head} {{{splits} {half} r[2]; {calls} return ember_join<{vt}>(r); }}")
            elif how == "libmvec":
                mangled = f"_ZGV{_ISA_BY_LANES[lanes]}N{lanes}{'v' * arity}_{fname}"
                out.append(f'extern "C" {vt} {mangled}({", ".join([vt] * arity)});')
                out.append(f"{head} {{ return {mangled}({', '.join('ab'[:arity])}); }}")
            else:
                args = ", ".join(f"{a}[l]" for a in "ab"[:arity])
                out.append(f"{head} {{ {vt} r; for (int l = 0; l < $L; ++l) r[l] = {fname}({args}); return r; }}")
    return "\n".join(out)


# ember_vexpf's last step, p * 2^z for integer-valued z: two exact multiplies by built exponents (the scale in two
# halves cannot overflow), as the scalar ember_expf; with AVX-512, one `vscalefps` (13% faster on a sigmoid chain
# in L2 on Zen 4). Both round once, and only where the result is denormal or infinite, so the lanes still agree
# with the scalar tail bit for bit.
_SCALE_BY_POW2 = """  const ember_i32x$L n = __builtin_convertvector(z, ember_i32x$L), n1 = n >> 1, n2 = n - n1;
  return p * (ember_f32x$L)((ember_u32x$L)(n1 + 127) << 23) * (ember_f32x$L)((ember_u32x$L)(n2 + 127) << 23);"""
_SCALEF = {16: ("__AVX512F__", "__builtin_ia32_scalefps512_mask(p, z, p, (unsigned short)-1, 4)"),
           8: ("__AVX512VL__", "__builtin_ia32_scalefps256_mask(p, z, p, (unsigned char)-1)"),
           4: ("__AVX512VL__", "__builtin_ia32_scalefps128_mask(p, z, p, (unsigned char)-1)")}


def _scale_by_pow2(lanes: int) -> str:
    if lanes not in _SCALEF:
        return _SCALE_BY_POW2
    macro, call = _SCALEF[lanes]
    return f"#if defined({macro})\n  return {call};\n#else\n{_SCALE_BY_POW2}\n#endif"


def vector_layer(lanes: int) -> str:
    """The vector types and functions at `lanes` float32 lanes."""
    helpers = _VECTOR_HELPERS.replace("$SCALE_BY_POW2", _scale_by_pow2(lanes))
    return string.Template(_VECTOR_TYPES + helpers + _vector_libm(lanes, vector_libm()) + "\n").substitute(L=lanes)
