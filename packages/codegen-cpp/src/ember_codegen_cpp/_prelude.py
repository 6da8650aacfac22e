"""The C++ prelude every generated translation unit starts with: types, conversions and Python/torch semantics.

No headers: the prelude declares the few libm functions kernels call, so a build parses a few hundred lines, not
<cmath>. Functions that glibc's libmvec has in every vector ISA are declared `omp declare simd`, so gcc vectorizes
loops that call them (libmvec is accurate to a few ulp). Helpers follow torch's kernels where C differs from
torch: NaN-propagating max/min, Python floor division and remainder, round-to-nearest-even bfloat16, shifts past
the bit width, integer division by zero (which sets the kernel's error flag; the wrapper then lets torch raise).
"""

from __future__ import annotations

import functools

from ._build import vector_lanes
from ._libm import LIBM, vector_libm
from ._vector_prelude import VECTOR_GENERIC, scalar_layer, vector_layer

# Element-iterations from which a kernel's parallel loop forks (`EMBER_PAR_MIN`; on 2 cores a fork pays off from
# about 8K elements of a sigmoid, cheap ops need more). A build may override it with -DEMBER_PAR_MIN=...
PAR_MIN = 16384

def _declarations(simd: frozenset[str]) -> str:
    lines = ['extern "C" {']
    for name, arity in LIBM.items():
        for fname, ctype in ((name, "double"), (name + "f", "float")):
            if fname in simd:
                lines.append("#pragma omp declare simd notinbranch")
            lines.append(f"{ctype} {fname}({', '.join([ctype] * arity)});")
    lines.append("}")
    return "\n".join(lines)


_HELPERS = r"""
typedef long long int64_t;
typedef int int32_t;
typedef short int16_t;
typedef signed char int8_t;
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;

#define EMBER_INLINE static inline __attribute__((always_inline))

EMBER_INLINE float ember_bits_f32(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
EMBER_INLINE uint32_t ember_f32_bits(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }

// bfloat16: the top half of a float32; rounding to nearest even as c10::BFloat16, NaN as 0x7FC0.
EMBER_INLINE float ember_load_bf16(uint16_t h) { return ember_bits_f32((uint32_t)h << 16); }
EMBER_INLINE uint16_t ember_store_bf16(float f) {
  uint32_t u = ember_f32_bits(f);
  return f != f ? (uint16_t)0x7FC0 : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
EMBER_INLINE float ember_round_bf16(float f) { return ember_load_bf16(ember_store_bf16(f)); }

// float16: IEEE half, as c10's fp16_ieee_{to,from}_fp32_value (branch-free, so loops vectorize).
EMBER_INLINE float ember_load_f16(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
  const float normalized = ember_bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = ember_bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  return ember_bits_f32(sign | (two_w < (1u << 27) ? ember_f32_bits(denormalized) : ember_f32_bits(normalized)));
}
EMBER_INLINE uint16_t ember_store_f16(float f) {
  float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = ember_f32_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = ember_bits_f32((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = ember_f32_bits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
EMBER_INLINE float ember_round_f16(float f) { return ember_load_f16(ember_store_f16(f)); }

// Integer arithmetic wraps, as torch's does in practice (signed overflow is undefined in C++).
template <typename T> struct ember_unsigned { typedef T type; };
template <> struct ember_unsigned<int64_t> { typedef uint64_t type; };
template <> struct ember_unsigned<int32_t> { typedef uint32_t type; };
template <> struct ember_unsigned<int16_t> { typedef uint16_t type; };
template <> struct ember_unsigned<int8_t> { typedef uint8_t type; };
#define EMBER_U(T, x) ((typename ember_unsigned<T>::type)(x))
template <typename T> EMBER_INLINE T ember_add(T a, T b) { return (T)(EMBER_U(T, a) + EMBER_U(T, b)); }
template <typename T> EMBER_INLINE T ember_sub(T a, T b) { return (T)(EMBER_U(T, a) - EMBER_U(T, b)); }
template <typename T> EMBER_INLINE T ember_mul(T a, T b) { return (T)(EMBER_U(T, a) * EMBER_U(T, b)); }
template <typename T> EMBER_INLINE T ember_neg(T a) { return (T)(EMBER_U(T, 0) - EMBER_U(T, a)); }
template <typename T> EMBER_INLINE T ember_iabs(T a) { return a < 0 ? ember_neg(a) : a; }

// Integer division: b == 0 gives 0 here (the caller flags an error); MIN / -1 wraps instead of trapping.
template <typename T> EMBER_INLINE T ember_truncdiv(T a, T b) {
  return b == 0 ? (T)0 : (b == (T)-1 ? ember_neg(a) : (T)(a / b));
}
template <typename T> EMBER_INLINE T ember_cmod(T a, T b) { return (b == 0 || b == (T)-1) ? (T)0 : (T)(a % b); }
template <typename T> EMBER_INLINE T ember_floordiv(T a, T b) {
  T q = ember_truncdiv(a, b), r = ember_cmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? (T)(q - 1) : q;
}
template <typename T> EMBER_INLINE T ember_mod(T a, T b) {
  T r = ember_cmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;
}
// Index arithmetic (int64, divisor nonzero): Python's floor division and remainder.
EMBER_INLINE int64_t ember_ifloor(int64_t a, int64_t b) {
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
EMBER_INLINE int64_t ember_imod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
EMBER_INLINE int64_t ember_imax(int64_t a, int64_t b) { return a > b ? a : b; }
EMBER_INLINE int64_t ember_imin(int64_t a, int64_t b) { return a < b ? a : b; }

// Floats: torch's floor division (div_floor_floating) and remainder.
template <typename T> EMBER_INLINE T ember_ffloordiv(T a, T b, T m) {
  if (b == 0) return a / b;
  T div = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) div -= (T)1;
  if (div == 0) return __builtin_copysign((T)0, a / b);
  T f = __builtin_floor(div);
  return (div - f > (T)0.5) ? f + (T)1 : f;
}
template <typename T> EMBER_INLINE T ember_fmodpy(T m, T b) {
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}

// max/min: NaN wins for floats, as torch.maximum / amax (a NaN b fails both tests and gives b).
EMBER_INLINE float ember_max(float a, float b) { return a > b ? a : (a != a ? a : b); }
EMBER_INLINE double ember_max(double a, double b) { return a > b ? a : (a != a ? a : b); }
EMBER_INLINE float ember_min(float a, float b) { return a < b ? a : (a != a ? a : b); }
EMBER_INLINE double ember_min(double a, double b) { return a < b ? a : (a != a ? a : b); }

// expf inline, so loops vectorize without a call: Cody-Waite reduction and Cephes' polynomial, within 1.01 ulp
// of exp over the normal range (torch's is within 0.57); NaN, +-inf, overflow and denormal results as expf.
EMBER_INLINE float ember_expf(float x) {
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  const float z = __builtin_rintf(x * 1.44269504088896341f);
  float r = __builtin_fmaf(z, -0.693359375f, x);
  r = __builtin_fmaf(z, 2.12194440e-4f, r);
  float p = 1.9875691500E-4f;
  p = __builtin_fmaf(p, r, 1.3981999507E-3f);
  p = __builtin_fmaf(p, r, 8.3334519073E-3f);
  p = __builtin_fmaf(p, r, 4.1665795894E-2f);
  p = __builtin_fmaf(p, r, 1.6666665459E-1f);
  p = __builtin_fmaf(p, r, 5.0000001201E-1f);
  p = __builtin_fmaf(p, r * r, r) + 1.0f;
  const int32_t n = (int32_t)z, n1 = n >> 1, n2 = n - n1;  // 2^n in two steps: no overflow of the scale
  return p * ember_bits_f32((uint32_t)(n1 + 127) << 23) * ember_bits_f32((uint32_t)(n2 + 127) << 23);
}
template <typename T> EMBER_INLINE T ember_max(T a, T b) { return a > b ? a : b; }
template <typename T> EMBER_INLINE T ember_min(T a, T b) { return a < b ? a : b; }

// Shifts as torch: a shift by a negative amount or past the width gives 0 (or the sign for >>).
template <typename T> EMBER_INLINE T ember_lshift(T a, T b) {
  typedef typename ember_unsigned<T>::type U;
  return ((int64_t)b < 0 || (int64_t)b >= (int64_t)(8 * sizeof(T))) ? (T)0 : (T)((U)a << b);
}
template <typename T> EMBER_INLINE T ember_rshift(T a, T b) {
  return ((int64_t)b < 0 || (int64_t)b >= (int64_t)(8 * sizeof(T))) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b);
}

// Integer powers as torch: negative exponents give 0 except for bases 1 and -1.
template <typename T> EMBER_INLINE T ember_ipow(T a, T b) {
  if (b < 0) return a == 1 ? (T)1 : (a == (T)-1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0);
  T r = 1;
  while (b) { if (b & 1) r = ember_mul(r, a); b >>= 1; a = ember_mul(a, a); }
  return r;
}

template <typename T> EMBER_INLINE T ember_sign(T a) { return (T)((T)0 < a) - (T)(a < (T)0); }

// erfinv: torch's calc_erfinv (rational approximation and two Newton steps).
template <typename T> static T ember_erfinv(T y) {
  const T a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
  const T b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
  const T c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
  const T d[2] = {3.543889200, 1.637067800};
  const T ay = __builtin_fabs(y);
  if (ay > 1) return __builtin_nan("");
  if (ay == 1) return __builtin_copysign(__builtin_inf(), y);
  T x, z, num, dem;
  if (ay <= (T)0.7) {
    z = y * y;
    num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + (T)1;
    x = y * num / dem;
  } else {
    z = (T)__builtin_sqrt(-__builtin_log(((T)1 - ay) / (T)2));
    num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    dem = (d[1] * z + d[0]) * z + (T)1;
    x = __builtin_copysign(num, y) / dem;
  }
  const T two_sqrtpi = (T)1.128379167095512573896158903121545171688;
  x = x - ((T)__builtin_erf(x) - y) / (two_sqrtpi * (T)__builtin_exp(-x * x));
  x = x - ((T)__builtin_erf(x) - y) / (two_sqrtpi * (T)__builtin_exp(-x * x));
  return x;
}

// Reduction steps. argmax/argmin keep the first index of the best value; NaN is best, as torch.
template <typename T> EMBER_INLINE void ember_argmax_step(T& bv, int64_t& bi, T v, int64_t i) {
  const bool take = bi < 0 || v > bv || (v != v && bv == bv);
  bv = take ? v : bv; bi = take ? i : bi;
}
template <typename T> EMBER_INLINE void ember_argmin_step(T& bv, int64_t& bi, T v, int64_t i) {
  const bool take = bi < 0 || v < bv || (v != v && bv == bv);
  bv = take ? v : bv; bi = take ? i : bi;
}
// Merging partial results (lanes): also prefer the smaller index among equal values.
template <typename T> EMBER_INLINE void ember_argmax_merge(T& bv, int64_t& bi, T v, int64_t i) {
  if (i < 0) return;
  const bool vn = v != v, bn = bv != bv;
  const bool take = bi < 0 || (vn && !bn) || (vn && bn && i < bi) || (!vn && !bn && (v > bv || (v == bv && i < bi)));
  if (take) { bv = v; bi = i; }
}
template <typename T> EMBER_INLINE void ember_argmin_merge(T& bv, int64_t& bi, T v, int64_t i) {
  if (i < 0) return;
  const bool vn = v != v, bn = bv != bv;
  const bool take = bi < 0 || (vn && !bn) || (vn && bn && i < bi) || (!vn && !bn && (v < bv || (v == bv && i < bi)));
  if (take) { bv = v; bi = i; }
}
// Welford: mean, m2 and count; merge is Chan's formula.
template <typename T> EMBER_INLINE void ember_welford_merge(T& mean, T& m2, T& n, T bmean, T bm2, T bn) {
  if (bn == 0) return;
  const T total = n + bn, delta = bmean - mean, w = bn / total;
  mean = mean + delta * w;
  m2 = m2 + bm2 + delta * delta * n * w;
  n = total;
}

"""


# The vector layer, once per vector length L (lanes of float32; a kernel's vectors of every dtype have L lanes,
# so a float64 vector spans two registers). Types are GCC vector extensions (`ember_f32x16`), a cast between two of
# one size reinterprets the bits, a comparison gives -1/0 lanes of the operands' width. Bool values are int32 lanes
# of -1 or 0 (`ember_i32xL`) whatever they compare, so one mask type serves every dtype.
@functools.cache
def prelude() -> str:
    """The prelude text for this machine: which libm functions are vectorized depends on its glibc, the vector
    lengths on its CPU (`vector_lanes`)."""
    lanes = vector_lanes()
    par_min = f"#ifndef EMBER_PAR_MIN\n#define EMBER_PAR_MIN {PAR_MIN}\n#endif\n"
    vectors = VECTOR_GENERIC + "".join(f"\n// ---- vectors of {n} lanes\n" + vector_layer(n) for n in lanes)
    vectors += f"\n// ---- scalar forms of the {lanes[0]}-lane functions\n" + scalar_layer(lanes[0])
    return ("// ember C++ prelude\n" + _HELPERS.lstrip("\n") + par_min + "\n" + _declarations(vector_libm()) + "\n"
            + vectors)
