"""The reduction table: every reduction of the loop IR described once, its identities really identities, its merges
and NaN rules those of torch, and the interpreter running what it says."""

from __future__ import annotations

import math

import pytest
import torch
from ember_core import to_dtype
from ember_lowering import (
    KERNEL_DTYPES,
    NAN_ARITHMETIC,
    NAN_EXTREME,
    NAN_IS_TRUE,
    NAN_PROPAGATES,
    REDUCTION_SEMANTICS,
    REDUCTIONS,
    SEMANTICS,
    Op,
    opmath,
    run_plan,
    verify_plan,
)
from ember_lowering.codegen import REDUCTION_SHAPES, CannotPrint, missing_reductions, one_reduction_plan

CASES = [(op, d) for op, s in REDUCTION_SEMANTICS.items() for d in s.dtypes()]
IDS = [f"{op.value}-{d}" for op, d in CASES]
ONE_VALUE = [(op, d) for op, d in CASES if REDUCTION_SEMANTICS[op].combine is not None]


def special_values(dtype: str) -> list:
    """The values of `dtype` a reduction's identity must survive: its extremes, signed zeros, infinities."""
    if dtype == "bool":
        return [False, True]
    if dtype in ("float32", "float64"):
        return [-math.inf, -1e30, -3.5, -1.0, -0.0, 0.0, 0.5, 2.0, 1e30, math.inf]
    info = torch.iinfo(to_dtype(dtype))
    return sorted({info.min, info.min + 1, max(info.min, -7), max(info.min, -1), 0, 1, 7, info.max - 1, info.max})


def rows(dtype: str, n: int = 12, count: int = 24, seed: int = 0) -> torch.Tensor:
    """`count` rows of `n` special values, a few NaNs among the floats; of three rows or more, the first is all the
    lowest value and the second all the highest."""
    values = special_values(dtype)
    g = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(values), (count, n), generator=g)
    x = torch.tensor(values, dtype=to_dtype(dtype))[pick]
    start = 2 * n if count > 2 else 0
    if count > 2:
        x[0], x[1] = x.min(), x.max()
    if dtype in ("float32", "float64"):
        x.view(-1)[start + torch.randint(0, x.numel() - start, (5,), generator=g)] = math.nan
    return x


def positions(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(x.shape[-1]).expand(x.shape)


def assert_same(got: tuple, want: tuple) -> None:
    """Equal results (floats to rounding: a merge adds in another order; signed zeros equal, as torch's sum of
    -0.0s is +0.0, which its accumulator starts from)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-6, atol=0)


def fold(op: Op, x: torch.Tensor) -> tuple:
    """The state after merging each element of each row into the identity state, left to right."""
    meaning = REDUCTION_SEMANTICS[op]
    state = meaning.filled(x.shape[:-1] + (1,), str(x.dtype).removeprefix("torch."))
    index = positions(x)
    for j in range(x.shape[-1]):
        state = meaning.merge(state, meaning.lift(x[..., j:j + 1], index[..., j:j + 1]))
    return state


def results_of(op: Op, state: tuple) -> tuple:
    """The results a final state gives: its value; argmax's index; Welford's mean and m2."""
    fields = REDUCTION_SEMANTICS[op].state
    return tuple(state[fields.index(name)] for name in REDUCTION_SEMANTICS[op].results)


# ---------------------------------------------------------------------------------------------- the table


def test_every_reduction_of_the_loop_ir_is_described():
    assert set(REDUCTION_SEMANTICS) == REDUCTIONS
    assert all(s.op is op for op, s in REDUCTION_SEMANTICS.items())


def test_every_compute_dtype_of_a_kernel_is_reduced_by_sum_max_and_argmax():
    computed = {opmath(d) for d in KERNEL_DTYPES}
    for op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_ARGMAX, Op.REDUCE_ANY):
        assert set(REDUCTION_SEMANTICS[op].dtypes()) == computed, op


def test_combine_ops_are_pointwise_ops_of_the_table_on_the_state_dtype():
    for op, meaning in REDUCTION_SEMANTICS.items():
        if meaning.combine is not None:
            for dtype in meaning.dtypes():
                state = meaning.state_dtypes(dtype)[0]
                assert SEMANTICS[meaning.combine].result_dtype(state) == state, (op, dtype)


def test_result_dtypes_follow_torch():
    x = torch.tensor([[1, 5, 2]], dtype=torch.int16)
    assert REDUCTION_SEMANTICS[Op.REDUCE_ARGMAX].result_dtypes("int16") == ("int64",)
    assert str(x.argmax(-1).dtype) == "torch.int64" and str(x.any(-1).dtype) == "torch.bool"
    assert REDUCTION_SEMANTICS[Op.REDUCE_ANY].result_dtypes("int16") == ("bool",)
    assert REDUCTION_SEMANTICS[Op.REDUCE_WELFORD].result_dtypes("float32") == ("float32", "float32")


# ---------------------------------------------------------------------------------------------- identities


@pytest.mark.parametrize(("op", "dtype"), ONE_VALUE, ids=[f"{op.value}-{d}" for op, d in ONE_VALUE])
def test_the_identity_prepended_to_a_row_changes_no_result(op, dtype):
    meaning = REDUCTION_SEMANTICS[op]
    x = rows(dtype)
    column = torch.full((x.shape[0], 1), meaning.identity(dtype), dtype=x.dtype)
    assert_same(meaning.reference(torch.cat([column, x], -1), None), meaning.reference(x, None))


@pytest.mark.parametrize(("op", "dtype"), ONE_VALUE, ids=[f"{op.value}-{d}" for op, d in ONE_VALUE])
def test_the_combine_op_with_the_identity_gives_the_value_back(op, dtype):
    meaning = REDUCTION_SEMANTICS[op]
    x = rows(dtype).flatten()
    value = (x != 0) if meaning.truth else x
    identity = torch.full_like(value, meaning.identity(dtype))
    combine = SEMANTICS[meaning.combine].reference
    assert_same((combine(identity, value),), (value,))
    assert_same((combine(value, identity),), (value,))


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=IDS)
def test_the_identity_state_is_neutral_in_a_merge(op, dtype):
    meaning = REDUCTION_SEMANTICS[op]
    x = rows(dtype) if op is not Op.REDUCE_WELFORD else torch.randn(6, 12, dtype=to_dtype(dtype))
    state = meaning.lift(x, positions(x))
    identity = meaning.filled(x.shape, dtype)
    assert_same(meaning.merge(identity, state), state)
    assert_same(meaning.merge(state, identity), state)


# ---------------------------------------------------------------------------------------------- merges


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=IDS)
def test_merging_each_element_into_the_identity_gives_the_reference(op, dtype):
    meaning = REDUCTION_SEMANTICS[op]
    x = rows(dtype) if op is not Op.REDUCE_WELFORD else torch.randn(6, 40, dtype=to_dtype(dtype)) * 3 + 1
    assert_same(results_of(op, fold(op, x)), meaning.reference(x, positions(x)))


@pytest.mark.parametrize("op", sorted(REDUCTIONS, key=lambda o: o.value), ids=lambda o: o.value)
def test_halves_merged_give_the_whole_row(op):
    meaning = REDUCTION_SEMANTICS[op]
    x = torch.randn(5, 33, dtype=torch.float64) * 4
    x[1, 20] = x[1, 3] = x[1].max() + 1  # a tie across the halves: the first index wins
    left, right = fold(op, x[:, :17]), fold(op, x[:, 17:])
    if "index" in meaning.state:
        right = (right[0], right[1] + 17)
    assert_same(results_of(op, meaning.merge(left, right)), meaning.reference(x, positions(x)))


# ---------------------------------------------------------------------------------------------- NaN


def nan_row(op: Op) -> torch.Tensor:
    return torch.tensor([[1.0, math.nan, 7.0, math.nan, -2.0]])


@pytest.mark.parametrize("op", sorted(REDUCTIONS, key=lambda o: o.value), ids=lambda o: o.value)
def test_the_nan_rule_is_what_torch_does(op):
    meaning = REDUCTION_SEMANTICS[op]
    x = nan_row(op)
    index = positions(x)
    eager = {Op.REDUCE_SUM: torch.sum, Op.REDUCE_PROD: torch.prod, Op.REDUCE_MAX: torch.amax,
             Op.REDUCE_MIN: torch.amin, Op.REDUCE_ARGMAX: torch.argmax, Op.REDUCE_ARGMIN: torch.argmin,
             Op.REDUCE_ANY: torch.any, Op.REDUCE_ALL: torch.all, Op.REDUCE_WELFORD: torch.var}[op](x, -1)
    got = results_of(op, fold(op, x))[0].flatten()
    if meaning.nan == NAN_EXTREME:  # the first NaN's index, as torch's argmax and argmin
        assert int(eager) == 1 and got.tolist() == [1]
    elif meaning.nan == NAN_IS_TRUE:  # NaN is not 0
        assert bool(eager) and got.tolist() == [True]
    else:
        assert meaning.nan in (NAN_PROPAGATES, NAN_ARITHMETIC)
        assert eager.isnan().all() and got.isnan().all()
    assert_same(meaning.reference(x, index)[:1], (got.view(1, 1),))


def test_max_and_min_propagate_nan_through_their_combine_op_as_torch():
    for op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
        meaning = REDUCTION_SEMANTICS[op]
        assert meaning.nan == NAN_PROPAGATES
        combine = SEMANTICS[meaning.combine].reference
        assert combine(torch.tensor(math.nan), torch.tensor(-math.inf)).isnan()
        assert combine(torch.tensor(math.inf), torch.tensor(math.nan)).isnan()


def test_argmax_of_an_all_lowest_row_is_its_first_index():
    x = torch.full((1, 6), -math.inf)
    assert fold(Op.REDUCE_ARGMAX, x)[1].tolist() == [[0]] == x.argmax(-1, keepdim=True).tolist()


# ---------------------------------------------------------------------------------------------- the interpreter


@pytest.mark.parametrize("shape", REDUCTION_SHAPES)
@pytest.mark.parametrize(("op", "dtype"), CASES, ids=IDS)
def test_the_interpreter_runs_each_conformance_plan_as_the_reference(op, dtype, shape):
    plan = one_reduction_plan(op, dtype, shape)
    verify_plan(plan)
    x_shape = [70 if str(n) == "s0" else int(n) for n in plan.buffer("x").shape]
    x = rows(dtype, n=x_shape[-1], count=x_shape[0]) if len(x_shape) == 2 else rows(dtype, n=x_shape[0], count=1)[0]
    if op is Op.REDUCE_WELFORD:
        x = torch.randn(x_shape, dtype=to_dtype(dtype))
    got = run_plan(plan, [x])
    flat = x.t() if shape == "across_rows" else x.reshape(-1, x.shape[-1]) if x.dim() == 2 else x.view(1, -1)
    want = [r.reshape(g.shape) for r, g in zip(REDUCTION_SEMANTICS[op].reference(flat, positions(flat)), got)]
    assert_same(tuple(got), tuple(want))


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=IDS)
def test_the_interpreter_reduces_an_empty_row_to_what_the_table_says(op, dtype):
    meaning = REDUCTION_SEMANTICS[op]
    got = run_plan(one_reduction_plan(op, dtype, "symbolic_row"), [torch.zeros(4, 0, dtype=to_dtype(dtype))])
    for g, value, d in zip(got, meaning.empty(dtype), meaning.result_dtypes(dtype)):
        assert_same((g,), (torch.full((4,), value, dtype=to_dtype(d)),))


def test_missing_reductions_lists_what_a_printer_refuses():
    def prints_all_but_argmax(kernel, layout, name):
        if any(i.op is Op.REDUCE_ARGMAX for i in kernel.instrs()):
            raise CannotPrint("no argmax")

    missing = missing_reductions(prints_all_but_argmax)
    assert missing == [f"reduce_argmax({d}, {s})" for d in REDUCTION_SEMANTICS[Op.REDUCE_ARGMAX].dtypes()
                       for s in REDUCTION_SHAPES]
