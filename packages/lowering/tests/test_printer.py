"""The canonical text form: every construct prints one line, deterministically, and reads back equal."""

import torch
from ember_lowering import NAN, Instr, Op, format_instr, format_plan, parse_plan
from lowering_checks import plan_of

# An operator whose schema takes every kind of argument the text form has: a plan names only registered operators.
_LIBRARY = torch.library.Library("ember_test_printer", "FRAGMENT")
_LIBRARY.define("every_argument(Tensor x, int[] a, SymInt s, float f, float g, float h, Tensor? n, bool b, str r, "
                "ScalarType t, Device d, Layout l, *, Any dim, MemoryFormat layout) -> (Tensor, Tensor)")

EVERY_KIND = """\
# ember kernel plan 'every_kind' on cpu
# passes: lower, fuse-inline
# symbols: s0=8 in [2, inf], s1=3 in [1, 64]
def every_kind(x, idx, n):
  x: f32[s0, 16] input
  idx: i64[4] input
  c: bf16[2, 3]{1, 2} constant
  p: f32[16, s0]{1, 16} view of x
  q: f32[3] view of x at 2*s0 + 1
  a: f32[s0, 16] temp
  b: f32[s0, 16] temp reuses a
  m: f32[s0] output
  am: i64[s0] output
  g: f32[4, 16] output
  e: f32[s0, 16] output
  z: c64[2] output
  st: f32[16] local
  kernel reduce_s0x16[i0 < s0, r0 < 16]:  # from amax, argmax
    loop:
      t0: f32 = load x[i0, r0]
      store st[r0] = t0
      t1: f32 = reduce_max t0
      t2: i64 = index 16*i0 + r0
      t3: i64 = reduce_argmax t0, t2
      t4, t5: f32 = reduce_welford t0
    t6: f32 = const nan
    t7: f32 = maximum t1, t6
    store m[i0] = t7
    store am[i0] = t3
  kernel pointwise_4x16[i0 < 4, i1 < 16]:  # from gather
    t0: i64 = load idx[i0]
    t1: b8 = const True
    t2: f32 = load x[Mod(t0, s0), Mod(i1, 2) + floor(i1/2)] if t1 else -inf
    store g[i0, i1] = t2 if t1
  kernel pointwise_s0x16[i0 < s0, i1 < 16]:
    t0: f32 = load p[i1, i0]
    t1: f32 = const 1e-05
    t2: f32 = add t0, t1
    store a[i0, i1] = t2
  extern e = aten.mm.default(a, p)  # from mm
{extern}
  return (m, am, g, e, z, sym('s0 + 1'))""".replace("{extern}", (
    "  extern z, _ = ember_test_printer.every_argument.default(x, [1, -2], sym('2*s0'), 1.5, -inf, nan, None, True, "
    "'mean', torch.float16, device('cpu'), torch.strided, dim=[0, [1, 2]], layout=torch.contiguous_format)"))


def test_text_reads_back_and_prints_identically():
    plan = parse_plan(EVERY_KIND)
    assert format_plan(plan) == EVERY_KIND
    assert parse_plan(format_plan(plan)) == plan


def test_nan_constants_compare_equal_after_a_round_trip():
    plan = parse_plan(EVERY_KIND)
    const = next(i for i in plan.kernels[0].instrs() if i.op is Op.CONST)
    assert const.value is NAN


def test_lowered_plans_round_trip():
    plan = plan_of(lambda x, i: (torch.softmax(x, -1), x[i].cumsum(0), x.t() + 1), torch.randn(4, 5),
                   torch.tensor([1, 0]), mode="symbolic")
    assert parse_plan(str(plan)) == plan and str(parse_plan(str(plan))) == str(plan)


def test_instructions_print_one_line_each():
    assert format_instr(Instr(Op.ADD, ("t2",), "float32", ("t0", "t1"))) == "t2: f32 = add t0, t1"
    assert format_instr(Instr(Op.CONST, ("t0",), "bool", value=False)) == "t0: b8 = const False"


def test_mark_points_at_a_statement_with_a_window():
    plan = parse_plan(EVERY_KIND)
    text = format_plan(plan, mark=("stmt", 1, 2), window=2)
    marked = [line for line in text.splitlines() if line.startswith(">")]
    assert marked == ["> " + "  t2: f32 = load x[Mod(t0, s0), Mod(i1, 2) + floor(i1/2)] if t1 else -inf"]
    assert text.startswith("  ...") and text.endswith("  ...") and len(text.splitlines()) == 7
