"""What each reduction of the loop IR computes, said once (as `_op_semantics.py` says it for pointwise ops).

A reduction folds the elements of a row into a partial state, one field or several, merges partial states
(lanes, chunks, blocks of a row) and reads its results off the final state. Its `ReductionSemantics` holds:
- `kinds`: the operand kinds it reduces (`float`, `int`, `bool`; argmax's by its values);
- `state`: the fields of a partial state: `value`; `value, index` (argmax, argmin); `count, mean, m2` (Welford);
- `initial(dtype)`: the identity state for operands of `dtype`, one Python value a field: merged with any state it
  leaves that state as it was. `identity(dtype)` is its first field, what a one-field reduction starts from (0; 1;
  -inf or the lowest integer or False; +inf or the highest integer or True; False for any, True for all);
- `combine`: the pointwise op of the loop IR that merges two one-field states (ADD, MUL, MAXIMUM, MINIMUM, OR,
  AND), so a codegen prints it as it prints that op; None where a state has several fields;
- `better`: for (value, index) states, the comparison op by which a value beats the best so far (GT for argmax, LT
  for argmin); among equal values the smaller index wins;
- `truth`: the operand is taken as a truth value (`x != 0`) before it is combined (any, all);
- `nan`: how NaN behaves: `NAN_ARITHMETIC` (it flows through the arithmetic: sum, prod, Welford), `NAN_PROPAGATES`
  (a NaN anywhere makes the result NaN: max, min), `NAN_EXTREME` (NaN counts as the extreme value, the first NaN's
  index wins: argmax, argmin), `NAN_IS_TRUE` (NaN is not 0, so true: any, all);
- `results`: the results' names, `result_dtypes(operand)` their dtypes (the operand's, bool, or int64);
- `reference(x, index)`: the meaning as torch, over the last dim of a non-empty `x` (keeping it as size 1;
  `index` is argmax's index operand, of x's shape); `empty(dtype)`: the results of reducing nothing;
- `merge(a, b)`: two partial states merged, as torch over tensors of states (`lift(x, index)` makes the state of
  one element): Chan's formula for Welford, the smaller index among equal values for argmax.

The loop-IR interpreter runs `reference` and `empty`; the C++ and Triton codegens print identities and combine
steps from here, and keep only how they lay lanes, chunks and blocks out. `tests/test_reduction_semantics.py`
checks the identities, merges and NaN rules against torch, and each codegen's conformance test asks
`missing_reductions` (`codegen/_op_conformance.py`) that it prints every (reduction, dtype) of this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from ember_core import to_dtype

from ._loop_ir import FLOAT_DTYPES, INT_DTYPES, NAN, Op, Scalar, scalar_of
from ._op_semantics import _DTYPES_OF_KIND, KINDS, SEMANTICS

# How NaN behaves (`ReductionSemantics.nan`; the module docstring says which reduction has which)
NAN_ARITHMETIC = "arithmetic"  # it flows through the arithmetic: the result is NaN
NAN_PROPAGATES = "propagates"  # a NaN anywhere makes the result NaN, whatever else the row holds
NAN_EXTREME = "extreme"  # NaN counts as the extreme value: the first NaN's index wins
NAN_IS_TRUE = "true"  # NaN is not 0: a true value

INDEX_DTYPE = "int64"  # argmax's and argmin's result, and their state's index field
NO_INDEX = (1 << 63) - 1  # the index of argmax's identity state: larger than any real one, so it never wins a tie

State = tuple[torch.Tensor, ...]


def lowest(dtype: str) -> Scalar:
    """The lowest value of `dtype` (max's identity): -inf, the lowest integer, False."""
    if dtype in FLOAT_DTYPES:
        return -float("inf")
    return torch.iinfo(to_dtype(dtype)).min if dtype in INT_DTYPES else False


def highest(dtype: str) -> Scalar:
    """The highest value of `dtype` (min's identity): +inf, the highest integer, True."""
    if dtype in FLOAT_DTYPES:
        return float("inf")
    return torch.iinfo(to_dtype(dtype)).max if dtype in INT_DTYPES else True


@dataclass(frozen=True, slots=True)
class ReductionSemantics:
    """One reduction's meaning (see the module docstring)."""

    op: Op
    kinds: frozenset[str]
    state: tuple[str, ...]
    results: tuple[str, ...]
    result: str  # "same", "bool" or "int64": the dtype of each result
    initial: Callable[[str], tuple[Scalar, ...]]
    reference: Callable[[torch.Tensor, torch.Tensor | None], State]
    merge: Callable[[State, State], State]
    empty: Callable[[str], tuple[Scalar, ...]]
    combine: Op | None = None
    truth: bool = False
    nan: str = NAN_ARITHMETIC
    better: Op | None = None

    def dtypes(self) -> tuple[str, ...]:
        """Every compute dtype the reduction takes as its (first) operand."""
        return tuple(d for k in KINDS if k in self.kinds for d in _DTYPES_OF_KIND[k])

    def identity(self, dtype: str) -> Scalar:
        """The identity of the state's first field, for operands of `dtype`."""
        return self.initial(dtype)[0]

    def result_dtypes(self, operand: str) -> tuple[str, ...]:
        dtype = {"same": operand, "bool": "bool", "int64": INDEX_DTYPE}[self.result]
        return (dtype,) * len(self.results)

    def state_dtypes(self, operand: str) -> tuple[str, ...]:
        """Each state field's dtype: an index is int64, a truth value bool, the rest of the operand's dtype."""
        value = "bool" if self.truth else operand
        return tuple(INDEX_DTYPE if f == "index" else value for f in self.state)

    def lift(self, x: torch.Tensor, index: torch.Tensor | None = None) -> State:
        """The state of the single elements `x` (elementwise)."""
        if self.state == ("value", "index"):
            return x, index.to(to_dtype(INDEX_DTYPE))
        if self.state == ("count", "mean", "m2"):
            return torch.ones_like(x), x, torch.zeros_like(x)
        return (x != 0,) if self.truth else (x,)

    def filled(self, shape: tuple[int, ...], dtype: str, device: torch.device | str = "cpu") -> State:
        """The identity state as tensors of `shape`, for operands of `dtype`."""
        return tuple(torch.full(shape, v, dtype=to_dtype(d), device=device)
                     for v, d in zip(self.initial(dtype), self.state_dtypes(dtype)))


# ---------------------------------------------------------------------------------------------- references
# Each reduces the last dim of a non-empty x, keeping it.


def _sum(x, index):
    return (x.sum(-1, keepdim=True, dtype=x.dtype),)


def _prod(x, index):
    return (x.prod(-1, keepdim=True, dtype=x.dtype),)


def _amax(x, index):
    return (x.amax(-1, keepdim=True),)


def _amin(x, index):
    return (x.amin(-1, keepdim=True),)


def _arg(pick: str):
    def reference(x, index):
        values = x.to(torch.uint8) if x.dtype == torch.bool else x  # torch has no argmax of bool (max.dim has)
        position = getattr(values, pick)(-1, keepdim=True)  # torch's: the first NaN, else the first best
        return (torch.gather(index.expand(x.shape), -1, position).to(to_dtype(INDEX_DTYPE)),)
    return reference


def _any(x, index):
    return ((x != 0).any(-1, keepdim=True),)


def _all(x, index):
    return ((x != 0).all(-1, keepdim=True),)


def _moments(x, index):
    mean = x.mean(-1, keepdim=True)
    return mean, ((x - mean) ** 2).sum(-1, keepdim=True)


# ---------------------------------------------------------------------------------------------- merges


def _by(op: Op):
    """Merging one-value states: the combine op's reference, kept in the state's dtype."""
    reference = SEMANTICS[op].reference

    def merge(a: State, b: State) -> State:
        return (reference(a[0], b[0]).to(a[0].dtype),)
    return merge


def _merge_arg(better_op: Op):
    """Merging (value, index) states: a NaN beats any number, then a better value wins, and among equal values (or
    two NaNs) the smaller index."""
    beats = SEMANTICS[better_op].reference

    def merge(a: State, b: State) -> State:
        (av, ai), (bv, bi) = a, b
        a_nan, b_nan = av != av, bv != bv
        better = beats(bv, av)
        tie = (bv == av) | (a_nan & b_nan)
        take = (b_nan & ~a_nan) | (~a_nan & better) | (tie & (bi < ai))
        return torch.where(take, bv, av), torch.where(take, bi, ai)
    return merge


def _merge_moments(a: State, b: State) -> State:
    """Chan's formula: counts add, the mean moves by delta * nb / n, m2 gains delta^2 * na * nb / n."""
    (na, ma, sa), (nb, mb, sb) = a, b
    n = na + nb
    w = torch.where(n > 0, nb / torch.where(n > 0, n, 1), 0)
    delta = mb - ma
    return n, ma + delta * w, sa + sb + delta * delta * na * w


# ---------------------------------------------------------------------------------------------- the table

F, FIB = frozenset({"float"}), frozenset(KINDS)


def _one_value(op: Op, reference, identity: Callable[[str], Scalar], combine: Op, result: str = "same",
               truth: bool = False, nan: str = NAN_ARITHMETIC) -> ReductionSemantics:
    """A reduction of any operand whose state is one value, merged by the pointwise op `combine`; reducing
    nothing gives the identity."""
    def initial(dtype: str) -> tuple[Scalar, ...]:
        return (identity(dtype),)
    return ReductionSemantics(op, FIB, ("value",), ("value",), result, initial, reference, _by(combine), initial,
                              combine, truth, nan)


def _arg_extreme(op: Op, pick: str, start: Callable[[str], Scalar], better: Op) -> ReductionSemantics:
    """argmax, argmin: (value, index) states starting from the value every other beats or equals and an index
    past all; reducing nothing gives index 0."""
    return ReductionSemantics(op, FIB, ("value", "index"), ("index",), "int64", lambda d: (start(d), NO_INDEX),
                              _arg(pick), _merge_arg(better), lambda d: (0,), nan=NAN_EXTREME, better=better)


REDUCTION_SEMANTICS: dict[Op, ReductionSemantics] = {s.op: s for s in (
    _one_value(Op.REDUCE_SUM, _sum, lambda d: scalar_of(0, d), Op.ADD),
    _one_value(Op.REDUCE_PROD, _prod, lambda d: scalar_of(1, d), Op.MUL),
    _one_value(Op.REDUCE_MAX, _amax, lowest, Op.MAXIMUM, nan=NAN_PROPAGATES),
    _one_value(Op.REDUCE_MIN, _amin, highest, Op.MINIMUM, nan=NAN_PROPAGATES),
    _one_value(Op.REDUCE_ANY, _any, lambda d: False, Op.OR, "bool", truth=True, nan=NAN_IS_TRUE),
    _one_value(Op.REDUCE_ALL, _all, lambda d: True, Op.AND, "bool", truth=True, nan=NAN_IS_TRUE),
    _arg_extreme(Op.REDUCE_ARGMAX, "argmax", lowest, Op.GT),
    _arg_extreme(Op.REDUCE_ARGMIN, "argmin", highest, Op.LT),
    ReductionSemantics(Op.REDUCE_WELFORD, F, ("count", "mean", "m2"), ("mean", "m2"), "same",
                       lambda d: (0.0, 0.0, 0.0), _moments, _merge_moments, lambda d: (NAN, 0.0)),
)}
