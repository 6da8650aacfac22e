"""The C++ prelude every generated translation unit starts with: types, conversions and Python/torch semantics.

No headers: the prelude declares the few libm functions kernels call, so a build parses a few hundred lines, not
<cmath>. Functions that glibc's libmvec has in every vector ISA are declared `omp declare simd`, so gcc vectorizes
loops that call them (libmvec is accurate to a few ulp). Helpers follow torch's kernels where C differs from
torch: NaN-propagating max/min, Python floor division and remainder, round-to-nearest-even bfloat16, shifts past
the bit width, integer division by zero (which sets the kernel's error flag; the wrapper then lets torch raise).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import string

from ._build import vector_lanes

# Element-iterations from which a kernel's parallel loop forks (`EMBER_PAR_MIN`; on 2 cores a fork pays off from
# about 8K elements of a sigmoid, cheap ops need more). A build may override it with -DEMBER_PAR_MIN=...
PAR_MIN = 16384

# libm functions kernels call: name → arity. Each exists as `name` (double) and `name + "f"` (float).
LIBM: dict[str, int] = {
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1, "sin": 1, "cos": 1, "tan": 1,
    "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "erf": 1, "erfc": 1, "lgamma": 1, "fmod": 2, "pow": 2, "atan2": 2,
}

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
_VECTOR_GENERIC = r"""
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
  return (ember_f32x$L)(__builtin_convertvector(h, ember_u32x$L) << 16);
}
EMBER_INLINE ember_u16x$L ember_vstore_bf16(ember_f32x$L f) {
  const ember_u32x$L u = (ember_u32x$L)f, r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return __builtin_convertvector(f != f ? (ember_u32x$L){} + 0x7FC0u : r, ember_u16x$L);
}
EMBER_INLINE ember_f32x$L ember_vround_bf16(ember_f32x$L f) { return ember_vload_bf16(ember_vstore_bf16(f)); }
EMBER_INLINE ember_f32x$L ember_vload_f16(ember_u16x$L h) {
  const ember_u32x$L w = __builtin_convertvector(h, ember_u32x$L) << 16, sign = w & 0x80000000u, two_w = w + w;
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


def _vector_libm(lanes: int, simd: frozenset[str]) -> str:
    """`ember_v<name>` for every libm function and both float widths at `lanes`: float32 calls libmvec's variant of
    that width by its vector-ABI name where glibc has it (`_ZGVeN16v_sinf`, glibc's stated bound: 4 ulp), any other
    runs the scalar function lane by lane."""
    out = []
    for name, arity in LIBM.items():
        params = ", ".join(f"V {a}" for a in "ab"[:arity])
        for fname, ctype, vt in ((name + "f", "float", "ember_f32x$L"), (name, "double", "ember_f64x$L")):
            head = f"EMBER_INLINE {vt} ember_v{name}({params.replace('V ', vt + ' ')})"
            isa = _ISA_BY_LANES.get(lanes)
            if fname in simd and ctype == "float" and isa:
                mangled = f"_ZGV{isa}N{lanes}{'v' * arity}_{fname}"
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


@functools.cache
def prelude() -> str:
    """The prelude text for this machine: which libm functions are vectorized depends on its glibc, the vector
    lengths on its CPU (`vector_lanes`)."""
    lanes = vector_lanes()
    par_min = f"#ifndef EMBER_PAR_MIN\n#define EMBER_PAR_MIN {PAR_MIN}\n#endif\n"
    vectors = _VECTOR_GENERIC + "".join(f"\n// ---- vectors of {n} lanes\n" + vector_layer(n) for n in lanes)
    return ("// ember C++ prelude\n" + _HELPERS.lstrip("\n") + par_min + "\n" + _declarations(vector_libm()) + "\n"
            + vectors)
