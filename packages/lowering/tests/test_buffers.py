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
