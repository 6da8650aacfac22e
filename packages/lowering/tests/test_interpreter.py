"""The loop-IR interpreter on hand-written plans: semantics of each construct, checked against torch."""

import pytest
import torch
from ember_lowering import POINTWISE_OPS, PlanError, PlanInterpreter, interpreter_rules, parse_plan, run_plan

HEAD = "# ember kernel plan 'g' on cpu\n# symbols: s0=4 in [2, inf]\ndef g(x):\n  x: f32[s0, 6] input\n"


def run(body: str, x: torch.Tensor):
    return run_plan(parse_plan(HEAD + body), [x])


def test_every_pointwise_op_has_an_implementation():
    from ember_lowering import Op

    assert POINTWISE_OPS - {Op.CAST} <= set(interpreter_rules)


def test_reductions_over_two_r_dims_in_any_position():
    x = torch.randn(4, 6)
    (s, a) = run("""\
  s: f32[] output
  a: i64[] output
  kernel k[r0 < s0, r1 < 6]:
    loop:
      t0: f32 = load x[r0, r1]
      t1: f32 = reduce_sum t0
      t2: i64 = index 6*r0 + r1
      t3: i64 = reduce_argmax t0, t2
    store s[] = t1
    store a[] = t3
  return (s, a)
""", x)
    torch.testing.assert_close(s, x.sum())
    assert int(a) == int(x.argmax())


def test_outer_dim_after_reduce_dim():
    x = torch.randn(4, 6)
    (m,) = run("""\
  m: f32[6] output
  kernel k[r0 < s0, i0 < 6]:
    loop:
      t0: f32 = load x[r0, i0]
      t1, t2: f32 = reduce_welford t0
    t3: f32 = const 3.0
    t4: f32 = div t2, t3
    store m[i0] = t4
  return (m)
""", x)
    torch.testing.assert_close(m, x.var(0))


def test_masked_loads_never_touch_masked_off_elements():
    x = torch.randn(4, 6)
    (y,) = run("""\
  y: f32[s0, 8] output
  kernel k[i0 < s0, i1 < 8]:
    t0: i64 = index i1
    t1: i64 = const 1
    t2: b8 = ge t0, t1
    t3: i64 = const 7
    t4: b8 = lt t0, t3
    t5: b8 = and t2, t4
    t6: f32 = load x[i0, i1 - 1] if t5 else -1.5
    store y[i0, i1] = t6
  return (y)
""", x)
    torch.testing.assert_close(y, torch.nn.functional.pad(x, (1, 1), value=-1.5))


def test_loads_out_of_bounds_raise():
    with pytest.raises(IndexError):
        run("  y: f32[s0, 6] output\n  kernel k[i0 < s0, i1 < 6]:\n    t0: f32 = load x[i0, i1 + 1]\n"
            "    store y[i0, i1] = t0\n  return (y)\n", torch.randn(4, 6))


def test_unwritten_memory_reads_as_nan():
    (y,) = run("  y: f32[s0, 6] output\n  kernel k[i0 < s0, i1 < 3]:\n    t0: f32 = load x[i0, i1]\n"
               "    store y[i0, i1] = t0\n  return (y)\n", torch.randn(4, 6))
    assert y[:, 3:].isnan().all() and not y[:, :3].isnan().any()


def test_a_reusing_buffer_shares_storage():
    x = torch.randn(4, 6)
    (out,) = run("""\
  a: f32[s0, 6] temp
  b: f32[s0, 6] temp reuses a
  y: f32[s0, 6] output
  kernel k[i0 < s0, i1 < 6]:
    t0: f32 = load x[i0, i1]
    store a[i0, i1] = t0
  kernel k2[i0 < s0, i1 < 6]:
    t0: f32 = const 2.0
    store b[i0, i1] = t0
  kernel k3[i0 < s0, i1 < 6]:
    t0: f32 = load a[i0, i1]
    store y[i0, i1] = t0
  return (y)
""", x)
    assert (out == 2.0).all()  # the plan was wrong: b overwrote a while a was live


def test_symbols_are_bound_from_input_shapes():
    plan = parse_plan(HEAD + "  return (sym('3*s0'))\n")
    assert PlanInterpreter(plan).run([torch.randn(5, 6)]) == [15]


def test_wrong_input_count_is_an_error():
    with pytest.raises(PlanError, match="takes 1 inputs, got 0"):
        run_plan(parse_plan(HEAD + "  return (x)\n"), [])


def test_a_local_is_one_row_per_outer_iteration():
    x = torch.randn(4, 6)
    (y,) = run("""\
  y: f32[s0, 6] output
  st: f32[6] local
  kernel k[i0 < s0, r0 < 6]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = exp t0
      store st[r0] = t1
      t2: f32 = reduce_sum t1
    loop:
      t3: f32 = load st[r0]
      t4: f32 = div t3, t2
      store y[i0, r0] = t4
  return (y)
""", x)
    torch.testing.assert_close(y, torch.softmax(x, -1))
