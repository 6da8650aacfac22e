"""Live ranges and the fit rule of buffer reuse planning."""

import sympy
from ember_lowering import parse_plan
from ember_lowering._buffers import _fits, _last_uses

PLAN = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4] input
  a: f32[4] temp
  v: f32[2] view of a at 1
  u: f32[4] temp
  y: f32[4] output
  kernel k0[i0 < 4]:
    t0: f32 = load x[i0]
    store a[i0] = t0
  extern u = aten.alias.default(v)
  kernel k1[i0 < 4]:
    t0: f32 = load u[i0]
    store y[i0] = t0
  return (y)
"""


def test_views_and_extern_results_extend_a_buffers_life():
    last = _last_uses(parse_plan(PLAN), {"v": "a"})
    assert last["a"] == 2 and last["u"] == 2 and last["y"] == 3


def test_storage_fits_when_provably_large_enough():
    s = sympy.Symbol("s0", integer=True)
    assert _fits(sympy.Integer(4), sympy.Integer(6)) and not _fits(sympy.Integer(6), sympy.Integer(4))
    assert _fits(2 * s, 2 * s) and not _fits(s, 2 * s)


def test_each_point_its_own_element_takes_strides_that_do_not_overlap():
    from ember_lowering import Dim
    from ember_lowering._buffers import _one_element_each
    i, j = sympy.symbols("i0 i1", integer=True)
    dims = [Dim("i0", sympy.Integer(4)), Dim("i1", sympy.Integer(8))]
    assert _one_element_each(8 * i + j, dims) and _one_element_each(i + 4 * j + 3, dims)  # row- or column-major
    assert not _one_element_each(4 * i + j, dims)  # rows overlap: (1, 0) and (0, 4) meet
    assert not _one_element_each(i, dims)  # a broadcast over i1: every i1 writes the same element
    assert not _one_element_each(sympy.floor(i / 2) + j, dims) and not _one_element_each(i * j, dims)
    assert not _one_element_each(8 * i + j, [Dim("i0", sympy.Symbol("s0", integer=True)), dims[1]])


IN_PLACE = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  a: f32[4, 8] temp
  b: f32[4, 8] temp
  y: f32[4, 8] output
  kernel k0[i0 < 4, i1 < 8]:
    t0: f32 = load x[i0, i1]
    t1: f32 = exp t0
    store a[i0, i1] = t1
  kernel k1[i0 < 4, i1 < 8]:
    READS
    store b[i0, i1] = t2
  kernel k2[i0 < 4, i1 < 8]:
    t0: f32 = load b[i0, i1]
    store y[i0, i1] = t0
  return (y)
"""


def _reuses(reads: str) -> str | None:
    from ember_lowering._buffers import plan_buffers
    text = IN_PLACE.replace("READS", reads.replace("\n", "\n    "))
    plan = plan_buffers(parse_plan(text), lambda *a: None)
    return plan.buffer("b").base


def test_a_kernel_writes_in_place_of_what_it_reads_last_only_at_the_same_elements():
    assert _reuses("t0: f32 = load a[i0, i1]\nt2: f32 = neg t0") == "a"
    assert _reuses("t0: f32 = load a[i0, i1]\nt1: f32 = load a[i0, i1]\nt2: f32 = mul t0, t1") == "a"
    assert _reuses("t0: f32 = load a[i0, 7 - i1]\nt2: f32 = neg t0") is None  # another point's element
    assert _reuses("t0: f32 = load a[i0, 0]\nt2: f32 = neg t0") is None  # read by every point of a row
    assert _reuses("t0: f32 = load a[i0, i1]\nt1: f32 = load a[i0, 0]\nt2: f32 = add t0, t1") is None
    assert _reuses("t0: f32 = load x[i0, i1]\nt2: f32 = neg t0") is None  # an input: never the plan's to reuse


def test_a_read_after_the_write_keeps_the_storage_apart():
    from ember_lowering._buffers import plan_buffers
    # k1 writes b, then reads a where b now is: b may not take a's storage
    k1 = "t0: f32 = load x[i0, i1]\n    store b[i0, i1] = t0\n    t1: f32 = load a[i0, i1]\n    t2: f32 = neg t1"
    late = IN_PLACE.replace("READS", k1).replace("    store b[i0, i1] = t2\n  kernel k2",
                                                 "    store y[i0, i1] = t2\n  kernel k2")
    late = late.replace("t0: f32 = load b[i0, i1]\n    store y", "t0: f32 = load b[i0, i1]\n    store z")
    late = late.replace("  y: f32[4, 8] output\n", "  y: f32[4, 8] temp\n  z: f32[4, 8] output\n").replace(
        "return (y)", "return (z, y)")
    assert plan_buffers(parse_plan(late), lambda *a: None).buffer("b").base is None


def test_what_an_aten_call_read_lends_nothing_in_place():
    """`u` is an ATen result that may view `a`: a kernel reading both must not write over `a` (its storage is u's)."""
    from ember_lowering._buffers import plan_buffers
    text = PLAN.replace("  y: f32[4] output", "  b: f32[4] temp\n  y: f32[4] output").replace(
        "    t0: f32 = load u[i0]\n    store y[i0] = t0\n  return (y)",
        "    t0: f32 = load u[i0]\n    t1: f32 = load a[i0]\n    t2: f32 = add t0, t1\n    store b[i0] = t2\n"
        "  kernel k2[i0 < 4]:\n    t0: f32 = load b[i0]\n    store y[i0] = t0\n  return (y)")
    assert "load a[i0]" in text
    assert plan_buffers(parse_plan(text), lambda *a: None).buffer("b").base is None


def test_the_verifier_refuses_storage_shared_by_two_live_buffers():
    import pytest
    from ember_lowering import PlanError
    from ember_lowering._verify import verify_plan
    text = IN_PLACE.replace("  b: f32[4, 8] temp", "  b: f32[4, 8] temp reuses a")
    verify_plan(parse_plan(text.replace("READS", "t0: f32 = load a[i0, i1]\nt2: f32 = neg t0".replace(
        "\n", "\n    "))))  # in place: each element read where it is written, before
    for reads in ("t0: f32 = load a[i0, 7 - i1]\nt2: f32 = neg t0", "t2: f32 = load x[i0, i1]"):
        bad = text.replace("READS", reads.replace("\n", "\n    "))
        if "load a" not in bad:  # a read after b is written: the two live together
            bad = bad.replace("    t0: f32 = load b[i0, i1]\n    store y", "    t0: f32 = load b[i0, i1]\n"
                              "    t1: f32 = load a[i0, i1]\n    t3: f32 = add t0, t1\n    store y")
            bad = bad.replace("store y[i0, i1] = t0\n  return", "store y[i0, i1] = t3\n  return")
        with pytest.raises(PlanError, match="takes the storage of 'a'"):
            verify_plan(parse_plan(bad))
