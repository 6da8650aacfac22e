"""cat-in-place: a cat of more pieces than a kernel takes (ATen's) is assembled in its buffer by the kernels that
write its pieces; pieces no kernel writes are copied into their slices; the plan's results are the graph's."""

import pytest
import torch
from ember_lowering import Extern, PlanError, lower_graph, parse_plan, schedule, verify_plan
from ember_lowering.codegen import PlanLayout
from ember_lowering.loop_passes.cat_in_place import CatInPlace
from lowering_checks import check, trace, verdicts

N = 12  # pieces: more than a kernel's cat takes (MAX_CAT_PIECES)


def cats(plan) -> list[Extern]:
    return [s for s in plan.steps if isinstance(s, Extern) and s.op == "aten.cat.default"]


def parts_of(plan, base: str) -> list[str]:
    return [b.name for b in plan.buffers if b.kind == "part" and b.base == base]


def decisions_of(fn, *args):
    decisions = []
    schedule(lower_graph(trace(fn, *args)), check=True, decisions=decisions)
    return [d for d in decisions if d.pass_id == "cat-in-place"]


def recurrence(x, w):
    """An unrolled recurrence: each step's state is a kernel's result, read by the next step's matmul, and all of
    them are concatenated (an RNN's output sequence)."""
    h, states = x, []
    for _ in range(N):
        h = torch.tanh(h @ w) * 0.5 + h
        states.append(h)
    return torch.cat(states).sum(0), torch.cat(states) @ w.t()


def test_the_states_of_a_recurrence_are_written_into_the_cats_buffer():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    plan = check(recurrence, x, w)
    assert len(cats(plan)) == 1  # the second cat of the same states: ATen's (a buffer lives in one place)
    assert verdicts(decisions_of(recurrence, x, w)) == {("assembled", "pieces-in-place"),
                                                        ("kept", "few-pieces-in-place")}
    bases = {b.base for b in plan.buffers if b.kind == "part"}
    assert len(bases) == 1
    (base,) = bases
    assert len(parts_of(plan, base)) == N
    layout = PlanLayout(plan)
    assert layout.is_owner(base)  # the wrapper allocates it before the first part's kernel
    assert sorted(layout.rel_offset(p) for p in parts_of(plan, base)) == [32 * k for k in range(N)]


def test_pieces_no_kernel_writes_are_copied_into_their_slices():
    def fn(x, y, z):
        pieces = [x, y.t()] + [(z * k).sin() for k in range(N - 2)]  # an input and a transposed input
        return torch.cat(pieces) * 2

    x, y, z = torch.randn(3, 5), torch.randn(5, 3), torch.randn(3, 5)
    plan = check(fn, x, y, z)
    assert not cats(plan)
    (base,) = {b.base for b in plan.buffers if b.kind == "part"}
    assert len(parts_of(plan, base)) == N
    copies = [k for k in plan.kernels if [i.op.value for i in k.instrs()] == ["load", "store"]]
    assert sorted(plan.buffer(next(k.instrs()).buffer).kind for k in copies) == ["input", "view"]


def test_a_cat_of_mostly_inputs_stays_atens():
    def fn(*xs):
        return torch.cat([*xs[:-1], xs[-1].exp()]) * 2

    xs = [torch.randn(2, 3) for _ in range(N)]
    plan = check(fn, *xs)
    assert len(cats(plan)) == 1
    assert verdicts(decisions_of(fn, *xs)) == {("kept", "few-pieces-in-place")}


def test_a_cat_along_a_dim_after_a_longer_one_stays_atens():
    def fn(x):
        return torch.cat([(x * k).sin() for k in range(N)], dim=1) * 2  # each piece's slice is strided

    x = torch.randn(3, 4)
    plan = check(fn, x)
    assert len(cats(plan)) == 1
    assert verdicts(decisions_of(fn, x)) == {("kept", "layout")}


def test_a_cat_along_dim_1_of_a_leading_dim_of_size_1_is_assembled():
    def fn(x):
        return torch.cat([(x * k).sin() for k in range(N)], dim=1) * 2

    plan = check(fn, torch.randn(1, 3, 4))
    assert not cats(plan)


def test_a_piece_that_is_an_output_or_views_one_keeps_its_own_storage():
    def fn(x):
        pieces = [(x * k).sin() for k in range(N)]
        return torch.cat(pieces) * 2, pieces[0], pieces[1].t()

    x = torch.randn(3, 4)
    plan = check(fn, x)
    assert not cats(plan)
    (base,) = {b.base for b in plan.buffers if b.kind == "part"}
    outputs = set(plan.outputs)
    assert not any(b.base == base and b.name in outputs for b in plan.buffers)
    assert len(parts_of(plan, base)) == N  # two of them copies


def test_a_cat_that_an_aten_call_then_writes_into_stays_atens():
    """extern-in-place makes the scatter write into the cat's result, which nothing reads after it; the pieces are
    read after it, so they must not be the cat's storage."""
    def fn(x, i, v):
        pieces = [(x * k).sin() for k in range(N)]
        y = torch.cat(pieces).index_put((i,), v, accumulate=True)
        return y, pieces[0] * y.sum()  # the piece is read after the scatter

    x, i, v = torch.randn(2, 3), torch.tensor([0, 5, 5]), torch.randn(3, 3)
    plan = check(fn, x, i, v)
    assert len(cats(plan)) == 1
    assert [s.op for s in plan.steps if isinstance(s, Extern) and s.op != "aten.cat.default"] == \
           ["aten.index_add_.default"]


def test_a_cat_of_several_dtypes_stays_atens():
    def fn(x, y):
        return torch.cat([(x * k).sin() for k in range(N)] + [y.exp()]) * 2

    x, y = torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64)
    check(fn, x, y)
    assert verdicts(decisions_of(fn, x, y)) == {("kept", "dtypes")}


def test_the_pass_alone_keeps_the_plans_results():
    from lowering_checks import before_after
    _, after, decisions = before_after(recurrence, torch.randn(4, 8), torch.randn(8, 8), passes=[CatInPlace()])
    assert ("assembled", "pieces-in-place") in verdicts(decisions)
    assert "part" in str(after)


# ---------------------------------------------------------------------------------------------- the verifier

PLAN = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[2, 4] input
  a: f32[1, 4] part of c
  b: f32[1, 4] part of c at 4
  c: f32[2, 4] temp
  y: f32[2, 4] output
  kernel k0[i0 < 4]:
    t0: f32 = load x[0, i0]
    store a[0, i0] = t0
  kernel k1[i0 < 4]:
    t0: f32 = load x[1, i0]
    t1: f32 = exp t0
    store b[0, i0] = t1
  kernel k2[i0 < 2, i1 < 4]:
    t0: f32 = load c[i0, i1]
    store y[i0, i1] = t0
  return (y)
"""


def ordered(text: str) -> str:
    """The plan with its assembled buffer declared before its parts (the printer's order)."""
    lines = text.splitlines()
    c = next(j for j, line in enumerate(lines) if line.startswith("  c:"))
    line = lines.pop(c)
    lines.insert(next(j for j, line in enumerate(lines) if " part of " in line), line)
    return "\n".join(lines) + "\n"


def test_a_plan_with_parts_verifies_prints_and_runs():
    from ember_lowering import run_plan
    plan = parse_plan(ordered(PLAN))
    verify_plan(plan)
    assert "b: f32[1, 4] part of c at 4" in str(plan)
    x = torch.randn(2, 4)
    (y,) = run_plan(plan, [x])
    torch.testing.assert_close(y, torch.stack([x[0], x[1].exp()]))


@pytest.mark.parametrize("change, message", [
    (("part of c at 4", "part of c at 5"), "the parts of 'c' do not tile it"),
    (("  kernel k1[i0 < 4]:", "  kernel k3[i0 < 4]:\n    t0: f32 = load c[0, i0]\n    store y[0, i0] = t0\n"
                              "  kernel k1[i0 < 4]:"), "load of 'c' before any step writes it"),
    (("t1: f32 = exp t0\n    store b[0, i0] = t1", "t1: f32 = load c[0, i0]\n    store b[0, i0] = t1"),
     "load of 'c' before any step writes it"),
    (("    store a[0, i0] = t0", "    store a[0, i0] = t0\n    store c[1, i0] = t0"), "assembled from parts"),
    (("c: f32[2, 4] temp", "c: f32[2, 4]{1, 2} temp"), "is not row-major"),
    (("a: f32[1, 4] part of c", "a: f64[1, 4] part of c"), "a part lies in a temp or an output of its dtype"),
])
def test_broken_part_rules_are_named(change, message):
    text = ordered(PLAN.replace(*change))
    with pytest.raises(PlanError, match=message):
        verify_plan(parse_plan(text))


def test_a_kernel_may_take_a_parts_own_pointer():
    """`PlanLayout.pointer`: a part (or a view of one) is addressed from the part's first element; anything else
    from its root."""
    plan = parse_plan(ordered(PLAN.replace("  y: f32[2, 4] output\n",
                                           "  y: f32[2, 4] output\n  v: f32[4] view of b\n")))
    layout = PlanLayout(plan)
    assert [layout.pointer(n) for n in ("a", "b", "v", "c", "x")] == ["a", "b", "b", "c", "x"]
    assert [layout.rel_offset(n) for n in ("a", "b", "v", "c")] == [0, 4, 4, 0]
