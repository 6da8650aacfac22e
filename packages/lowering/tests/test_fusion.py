"""The fusion machinery the passes share: space matching, merging, forwarding, loop folding, dependencies."""

import sympy
from ember_lowering import parse_plan
from ember_lowering._fusion import deps_of, forward_stores, merge_loops, space_map, toposort
from ember_lowering._loop_ir import Loop, Op

PLAN = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  m: f32[4] temp
  y: f32[4, 8] temp
  s: f32[4] output
  kernel max[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_max t0
    store m[i0] = t1
  kernel sub[i0 < 4, i1 < 8]:
    t0: f32 = load x[i0, i1]
    t1: f32 = load m[i0]
    t2: f32 = sub t0, t1
    store y[i0, i1] = t2
  kernel sum[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load y[i0, r0]
      t1: f32 = reduce_sum t0
    store s[i0] = t1
  return (s)
"""


def test_spaces_match_in_full_or_on_the_outer_dims():
    plan = parse_plan(PLAN)
    red, pw, _ = plan.kernels
    full = space_map(red, pw)
    assert full.place_b == "loop" and full.map_b == {sympy.Symbol("i1", integer=True): sympy.Symbol("r0", integer=True)}
    outer = space_map(red, pw.replace(dims=pw.dims[:1]))
    assert outer.place_b == "outer"
    assert space_map(red, pw.replace(dims=(pw.dims[1], pw.dims[0]))) is None


def test_dependencies_and_paths():
    deps = deps_of(parse_plan(PLAN))
    assert deps.deps == [set(), {0}, {1}] and deps.path(0, 2) and not deps.path(0, 1)


def test_toposort_restores_dependency_order():
    plan = parse_plan(PLAN)
    assert [k.name for k in toposort(plan.steps[::-1], {})] == ["max", "sub", "sum"]


def test_stores_forward_to_loads_of_the_same_element_and_loops_fold():
    text = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  y: f32[4, 8] temp
  s: f32[4] output
  kernel k[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = exp t0
      store y[i0, r0] = t1
    loop:
      t2: f32 = load y[i0, r0]
      t3: f32 = reduce_sum t2
    store s[i0] = t3
  return (s)
"""
    kernel = parse_plan(text).kernels[0]
    folded = forward_stores(merge_loops(kernel))
    (loop, store) = folded.body
    assert [i.op.value for i in loop.body] == ["load", "exp", "store", "reduce_sum"]
    assert loop.body[-1].srcs == ("t1",)


def test_a_loop_that_needs_the_previous_loops_result_stays_apart():
    text = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  s: f32[4] output
  kernel k[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_max t0
    loop:
      t2: f32 = load x[i0, r0]
      t3: f32 = sub t2, t1
      t4: f32 = reduce_sum t3
    store s[i0] = t4
  return (s)
"""
    kernel = parse_plan(text).kernels[0]
    assert merge_loops(kernel) == kernel
    independent = parse_plan(text.replace("sub t2, t1", "neg t2")).kernels[0]
    assert len(merge_loops(independent).body) == 2


def test_a_masked_load_of_what_a_loops_result_was_stored_to_stays_after_that_store():
    """A reduction over a where of an earlier reduction's result (the backward of `a[:, 0] = s[:, 1] * 2` under a
    slice_scatter) reads the stored sum through a masked load, which store forwarding leaves alone. Folding the
    second loop into the first moved that load before the first loop: it read the sum before it was written, and
    the kernel returned whatever the buffer held (1e21 where eager gave 7)."""
    text = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  s: f32[4, 1] temp
  u: f32[4, 1] output
  kernel k[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_sum t0
    store s[i0, 0] = t1
    t2: i64 = index i0
    t3: i64 = const 4
    t4: b8 = lt t2, t3
    t5: f32 = load s[i0, 0] if t4 else 0.0
    loop:
      t6: f32 = load x[i0, r0]
      t7: f32 = mul t6, t5
      t8: f32 = reduce_sum t7
    store u[i0, 0] = t8
  return (u)
"""
    kernel = parse_plan(text).kernels[0]
    folded = merge_loops(kernel)
    order = [(type(s).__name__, getattr(s, "op", None), getattr(s, "buffer", None)) for s in folded.body]
    store = order.index(("Instr", Op.STORE, "s"))
    load = order.index(("Instr", Op.LOAD, "s"))
    assert store < load, order
    assert isinstance(folded.body[-2], Loop) and len(folded.body) - 2 > load  # the second loop after it


def test_a_loop_that_indexes_with_a_masked_load_after_the_first_loop_is_not_folded_into_it():
    """As above, with the masked load's value an index of the second loop's load (a gather by an index computed and
    stored in the same kernel: tests/training_fuzz seed 273). The check that the second loop needs nothing the
    first one leaves behind looked at its operands and not at its indices: the loops were folded, the load stayed
    after them, and the plan read an index before defining it (a PlanError, the graph ran in the interpreter)."""
    text = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  s: i64[4] temp
  u: f32[4, 1] output
  w: f32[4, 1] output
  kernel k[i0 < 4, r0 < 8]:
    loop:
      t3: f32 = load x[i0, r0]
      t4: f32 = reduce_sum t3
    store u[i0, 0] = t4
    t0: i64 = index i0
    t1: i64 = const 3
    t2: i64 = fmod t0, t1
    store s[i0] = t2
    t5: b8 = lt t0, t1
    t6: i64 = load s[i0] if t5 else 0
    loop:
      t7: f32 = load x[r0, t6] if t5 else 0.0
      t8: f32 = reduce_sum t7
    store w[i0, 0] = t8
  return (u, w)
"""
    folded = merge_loops(parse_plan(text).kernels[0])
    where = {}  # value → position of the statement that defines it (a loop's position for what it defines)
    for k, s in enumerate(folded.body):
        for i in s.body if isinstance(s, Loop) else (s,):
            where.update(dict.fromkeys(i.outs, k))
    gather = next(k for k, s in enumerate(folded.body) if isinstance(s, Loop)
                  and any(str(e) == "t6" for i in s.body for e in i.index))
    assert where["t6"] < gather, folded
