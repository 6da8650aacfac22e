"""The vector layer's functions against torch over the whole float32 range: a million values spread evenly over the
bit patterns (every exponent, both signs, denormals), half a million evenly over [-10, 10] (where the spread bits are
sparse and most values are), and ±0, ±inf, NaN, the extreme normals and denormals.

Every vector width the build can take on this CPU is tested (`WIDTHS`): its native one, and on an AVX-512 CPU the
8-lane (256-bit) kernels max-autotune may choose, which call the AVX2 variants of the vector functions (libmvec's
`_ZGVdN8v_*`, ember's own exp at 8 lanes); an AVX2 CPU has only those, an SSE or NEON one 4 lanes.

The stated accuracy (`ULPS`) is the largest distance in units in the last place from the exact result (torch's in
float64, rounded to float32; torch's own float32 kernels differ from it too: sinh and cosh overflow to inf from
88.72 where the exact value is finite up to 89.4): exp, sigmoid, erf and (with 16 lanes) tanh are ember's
(`ember_vexpf`, `_own_math.py`: erf and tanh within 1 ulp), the other libm functions libmvec's (glibc states 4 ulp)
or Sleef's, the rest exact. NaN must come out where the reference has it, infinities equal."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_cpp import CppCodegen, compiler
from ember_codegen_cpp._build import vector_lanes
from ember_codegen_cpp._kernel_printer import KernelPrinter
from ember_codegen_cpp._variants import Variant
from ember_core import record_events
from helpers import compile_fn

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")

ULPS = {
    "exp": 2, "sigmoid": 2, "tanh": 1, "erf": 1, "erfc": 5, "sin": 4, "cos": 4, "tan": 5, "log": 4, "log2": 4,
    "log10": 4, "log1p": 4, "expm1": 4, "exp2": 4, "asin": 4, "acos": 4, "atan": 4, "sinh": 4, "cosh": 4,
    "asinh": 4, "acosh": 4, "atanh": 4, "sqrt": 0, "rsqrt": 1, "abs": 0, "floor": 0, "ceil": 0, "round": 0,
    "trunc": 0, "reciprocal": 0, "neg": 0,
}
# Every function is at least as accurate as eager's float32 kernel on the same values, but for these (ulps more):
# libmvec's, 2 ulp where eager's are 1 (`ember_codegen_cpp._sleef`): asinh, acosh and cosh, whose Sleef functions
# overflow early.
WORSE_THAN_EAGER = {"asinh": 1, "acosh": 1, "cosh": 1}
# The worst ulp says little about how often a function is off: libmvec's 16-lane tanh is 1 ulp at worst, as eager's,
# but off by one in 38% of the values of [-10, 10] where eager's is in 0.1% (RMS error 0.45 ulp against 0.28), and a
# training program's gradient through it came out 5x as far from float64's as eager's (tests/training_fuzz --floats,
# seed 9). So the RMS error, over the whole range and over [-10, 10], is held to eager's, within this factor
# (libmvec's sin and cos are the closest: 1.4x eager's Sleef)...
RMS_FACTOR = 1.5
# The result is within ULPS or within this absolute distance: near a zero of the function (sin near pi, a rounding
# of float32's pi), and sigmoid below -88.7, which is 0 where the exact value is a denormal (as torch's float32).
ABS = {"sigmoid": 1.2e-38, "sin": 1e-6, "cos": 1e-6, "tan": 1e-6, "erfc": 1e-37, "log": 1e-6, "log2": 1e-6,
       "log10": 1e-6}


class NarrowVectors(CppCodegen):
    """Every kernel printed as max-autotune's 256-bit variant: 8 lanes on an AVX-512 CPU."""

    def print_kernel(self, kernel, layout, name):
        return KernelPrinter(kernel, layout, name, Variant(vector_bits=256)).print()


# lanes → the codegen printing kernels of that width
WIDTHS = {vector_lanes()[0]: CppCodegen(), **({8: NarrowVectors()} if vector_lanes()[1:] == (8,) else {})}


def whole_range(n: int = 1 << 20) -> torch.Tensor:
    bits = torch.arange(n, dtype=torch.int64) * ((1 << 32) // n) + 12345  # every exponent, both signs
    bits = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 3.4028235e38, -3.4028235e38,
                            1.1754944e-38, 1e-45, -1e-45, 1e-40, 88.7, 89.0, -103.9, -104.0, 1.0, -1.0, 0.5])
    dense = torch.linspace(-10.0, 10.0, n // 2 + 1)  # where most values are: every 4e-5, where spread bits are sparse
    return torch.cat([bits.view(torch.float32), dense, special])  # not a multiple of the lanes: a scalar tail too


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Float32 values' distance in representable steps (+0 and -0 are one point)."""
    def ordered(x):
        i = x.view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)
    return (ordered(a) - ordered(b)).abs()


@pytest.mark.parametrize("lanes", sorted(WIDTHS, reverse=True), ids=lambda n: f"{n}lanes")
@pytest.mark.parametrize("name", sorted(ULPS))
def test_function_matches_torch_over_the_whole_float_range(name, lanes):
    x = whole_range()
    fn = getattr(torch, name)
    with record_events() as events:
        got = compile_fn(lambda t: fn(t), x, codegen=WIDTHS[lanes])([x])[0]
    simd = [s for e in events.events if e.kind == "kernels_generated" for s in e.data["simd"].values()]
    assert simd == [f"explicit {lanes} lanes"], simd
    want = fn(x.double()).float()
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{name}: NaN at {x[torch.isnan(got) != nan][:5].tolist()}"
    inf = torch.isinf(want)
    assert torch.equal(got[inf], want[inf]), f"{name}: infinities differ at {x[inf][got[inf] != want[inf]][:5]}"
    finite = ~nan & ~inf
    ulps = ulp_distance(got[finite], want[finite])
    close = (got[finite] - want[finite]).abs() <= ABS.get(name, 0)
    bad = (ulps > ULPS[name]) & ~close
    worst = int(ulps[~close].max()) if bool((~close).any()) else 0
    assert not bool(bad.any()), (f"{name}: {int(bad.sum())} values beyond {ULPS[name]} ulp (worst {worst}), "
                                 f"e.g. x={x[finite][bad][:3].tolist()} got {got[finite][bad][:3].tolist()} "
                                 f"torch {want[finite][bad][:3].tolist()}")
    eagers = worst_ulps(fn(x), want, ABS.get(name, 0))
    assert worst <= eagers + WORSE_THAN_EAGER.get(name, 0), f"{name}: {worst} ulp where eager's worst is {eagers}"
    exact, eager = fn(x.double()), fn(x)
    everywhere = torch.ones_like(x, dtype=torch.bool)
    for part, where in ((everywhere, "over the whole range"), (x.abs() <= 10, "in [-10, 10]")):
        ours, theirs = (rms_error(y[part], exact[part], ABS.get(name, 0)) for y in (got, eager))
        assert ours <= RMS_FACTOR * theirs + 1e-3, (f"{name}: RMS error {ours:.3f} ulp {where}, eager's "
                                                    f"{theirs:.3f} (at most {RMS_FACTOR}x)")


def rms_error(got: torch.Tensor, exact: torch.Tensor, near: float) -> float:
    """The root mean square of `got`'s distance from the float64 results `exact`, in float32 ulps at the exact value
    (a correctly rounded function scores 0.289), where the exact result is a finite normal float32 further from 0
    than `near` x 1000, and `got` is finite."""
    magnitude = exact.abs()
    ok = (magnitude > 1.2e-38) & (magnitude < 3.4e38) & (magnitude > near * 1000) & torch.isfinite(got)
    m = magnitude[ok].float()
    ulp = (torch.nextafter(m, torch.tensor(float("inf"))) - m).double()
    return float(((got[ok].double() - exact[ok]) / ulp).pow(2).mean().sqrt())


def worst_ulps(got: torch.Tensor, want: torch.Tensor, near: float) -> int:
    """The largest distance in ulp from the exact results `want` where both are finite and further apart than
    `near`."""
    ok = torch.isfinite(got) & torch.isfinite(want)
    far = (got[ok] - want[ok]).abs() > near
    return int(ulp_distance(got[ok][far], want[ok][far]).max()) if bool(far.any()) else 0


def test_kernels_of_pointwise_functions_are_explicit_vectors():
    x = whole_range(1 << 12)
    with record_events() as events:
        compile_fn(lambda t: ((t.sin() * t.cos() + t.exp()).tanh(), (t > 0).float() + t.floor()), x)([x])
    simd = [s for e in events.events if e.kind == "kernels_generated" for s in e.data["simd"].values()]
    assert simd and all(s == f"explicit {vector_lanes()[0]} lanes" for s in simd), simd


def test_a_value_put_in_every_lane_keeps_minus_zero_and_nan():
    """A row's value used by every element of the row (its max, here) is one value copied into all lanes: -0.0
    must stay -0.0 (copysign reads its sign) and NaN stay NaN."""
    x = torch.tensor([[-0.0] * 40, [float("nan")] * 40, [0.0] * 40, [-3.0] * 40])
    ones = torch.ones(4, 40)

    def fn(x, y):
        return (torch.copysign(y, x.amax(1, keepdim=True)),)

    got = compile_fn(fn, x, ones)([x, ones])[0]
    torch.testing.assert_close(got, fn(x, ones)[0], equal_nan=True)
    assert torch.equal(torch.signbit(got), torch.signbit(fn(x, ones)[0]))


@pytest.mark.parametrize("name", sorted(ULPS))
def test_functions_agree_bit_for_bit_in_lanes_and_in_the_scalar_tail(name):
    """A value computed in a vector loop's lanes and in its scalar tail has the same bits. The partitioner recomputes
    a forward value in the backward, in another kernel where an element may fall in the tail instead of the lanes;
    a max's backward compares the saved max with the recomputed input (`x == amax`, then divides by the count of
    equals), so a tanh one ulp apart (libmvec's in the lanes, glibc's scalar tanhf in the tail) made a count of 0
    and a NaN gradient (tests/training_fuzz). At the native width only: a kernel that calls a libm function is never
    printed 256 bits wide (`_variants._calls_libm`), and the scalar forms are the native width's."""
    lanes = vector_lanes()[0]
    # Rows of 2L-1 elements (a slice, so rows do not merge): the first L run in vector lanes, the last L-1 in the
    # scalar tail; the same values sit at both places. Denormal and infinite results included (the last step of
    # ember_vexpf differs by ISA).
    values = torch.cat([whole_range(1 << 16), torch.linspace(-104.5, -85.0, 4099), torch.linspace(87.0, 89.5, 999)])
    values = values[: values.numel() // (lanes - 1) * (lanes - 1)].view(-1, lanes - 1)
    x = torch.zeros(values.shape[0], 2 * lanes)
    x[:, : lanes - 1] = values
    x[:, lanes: 2 * lanes - 1] = values
    view = x[:, : 2 * lanes - 1]
    fn = getattr(torch, name)
    got = compile_fn(lambda t: fn(t), view)([view])[0]
    in_lanes, in_tail = got[:, : lanes - 1], got[:, lanes:]
    same = (in_lanes.view(torch.int32) == in_tail.view(torch.int32)) | (in_lanes.isnan() & in_tail.isnan())
    assert bool(same.all()), f"{name}: lanes and tail differ at x={values[~same][:5].tolist()}"


@pytest.mark.parametrize("name", sorted(ULPS))
def test_a_values_bits_do_not_depend_on_the_values_beside_it(name):
    """A vector function must compute each lane alone. Sleef's sin and cos (3.5- and 1-ulp alike) take their fast
    range reduction only when every lane is small, so a value beside a huge one came out an ulp apart; a value the
    backward recomputes must have the forward's bits wherever it lands. Every vector holds one huge value (or 0.5)
    beside the same values."""
    lanes = vector_lanes()[0]
    values = torch.linspace(-200.0, 200.0, (lanes - 1) * 20000).view(-1, lanes - 1)
    if name in ("acos", "asin", "atanh"):
        values = values / 200
    beside = {v: torch.cat([values, torch.full((values.shape[0], 1), v)], 1) for v in (3e7, 0.5)}
    fn = getattr(torch, name)
    run = compile_fn(lambda t: fn(t), beside[0.5])
    huge, small = (run([x])[0][:, : lanes - 1] for x in beside.values())
    same = (huge.view(torch.int32) == small.view(torch.int32)) | (huge.isnan() & small.isnan())
    assert bool(same.all()), f"{name}: the bits of {values[~same][:5].tolist()} depend on their neighbours"


def test_sleef_serves_the_functions_it_was_chosen_for():
    """Where torch's libtorch_cpu exports them and kernels have 8 or 16 lanes, the functions `_sleef.CHOICES` names
    call Sleef's (eager's own 1-ulp tan, inverse trigonometric ...; the accuracy above holds for them), log and log2
    its double functions on each half, rounded once (`WIDENED`: correctly rounded, as eager's MKL log on an Intel
    CPU), and only a unit that calls one links to libtorch_cpu."""
    from ember_codegen_cpp import prelude
    from ember_codegen_cpp._sleef import CHOICES, WIDENED, link_flags, sleef_functions, widened_functions

    lanes = vector_lanes()[0]
    chosen = sleef_functions(lanes)
    if lanes not in CHOICES or not chosen:
        pytest.skip("no 8- or 16-lane vectors here, or this torch exports none of the chosen Sleef functions")
    assert set(chosen) == set(CHOICES[lanes])
    assert set(widened_functions(lanes)) == set(WIDENED[lanes]) == {"logf", "log2f"}
    text = prelude()
    for name, symbol in chosen.items():
        assert f"N{lanes}v_{name}(" not in text
        if name in WIDENED[lanes]:  # Sleef's double function on each half, rounded once
            double = WIDENED[lanes][name]
            assert f"{{ return {symbol}(a); }}" not in text and f"__builtin_convertvector({double}(" in text
        else:
            assert f"{{ return {symbol}(a); }}" in text
    assert link_flags(text) == ()  # the prelude's definitions are not calls
    assert "-ltorch_cpu" in link_flags(text + "t1_v = ember_vlog(t0_v);")
    assert link_flags(text + "t1_v = ember_vtanh(t0_v);") == ()  # libmvec's
    assert "-ltorch_cpu" in link_flags(text + "t1 = ember_s_logf(t0);")  # a scalar tail's log is Sleef's too
    x = torch.linspace(0.01, 50, 4099)
    (out,) = compile_fn(torch.log, x)([x])
    torch.testing.assert_close(out, torch.log(x))


@pytest.mark.parametrize("name, top", [("erf", 4.5), ("tanh", 10.0)])
def test_own_functions_are_within_an_ulp_over_a_dense_sample_and_the_same_at_every_width(name, top):
    """ember's own erf and tanh (`_own_math.py`) on every 61st float32 of [0, top) and their negatives (the tables
    cover [0, 4) and [0, 2)): within one ulp of the exact result (`tools/fit_vector_math.py --check` measures every
    float32), and, where both widths use ember's, with 16 lanes bit for bit what the 8-lane kernels compute (one
    table, two registers; tanh is libmvec's with 8 lanes, faster there)."""
    from ember_codegen_cpp._vector_prelude import OWN

    x = torch.arange(0, int(torch.tensor(top).view(torch.int32)), 61, dtype=torch.int32).view(torch.float32)
    x = torch.cat([x, -x])
    fn = getattr(torch, name)
    want = fn(x.double()).float()
    results = {}
    for lanes, codegen in WIDTHS.items():
        if lanes not in OWN[f"{name}f"][0]:
            continue
        got = compile_fn(fn, x, codegen=codegen)([x])[0]
        worst = int(ulp_distance(got, want).max())
        assert worst <= 1, f"{lanes} lanes: {worst} ulp at x={x[ulp_distance(got, want) == worst][:3].tolist()}"
        assert torch.equal(torch.signbit(got), torch.signbit(x))
        results[lanes] = got
    if len(results) == 2:
        assert torch.equal(results[16].view(torch.int32), results[8].view(torch.int32))


@pytest.mark.parametrize("name", ["erf", "tanh"])
def test_own_tables_hold_what_the_method_needs(name):
    """Each interval's center c is a float32 inside it, within a factor 2 of every argument there (so x - c is
    exact), and its base is f(c) rounded to float32, off by at most 1e-3 ulp (the sum has no low part)."""
    import math

    from ember_codegen_cpp import _own_math

    tables, exact = {"erf": (_own_math.ERF, math.erf), "tanh": (_own_math.TANH, math.tanh)}[name]
    assert tables.centers[0] == tables.bases[0] == 0.0
    assert len(tables.centers) == len(tables.bases) == 16 and all(len(row) == 16 for row in tables.coefficients)
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    for i in range(1, 16):
        c, b = tables.centers[i], tables.bases[i]
        low, high = i * tables.width, (i + 1) * tables.width
        assert f32(c) == c and low <= c < high and c / 2 <= low and high <= 2 * c, (i, c)
        ulp = float(torch.nextafter(torch.tensor(b), torch.tensor(2.0))) - b
        assert f32(exact(c)) == b and abs(exact(c) - b) <= 1e-3 * ulp, (i, c, b)
    assert all(f32(v) == v for row in tables.coefficients for v in row)
