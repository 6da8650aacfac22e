"""Long reductions with few results, split in two: a partial reduction over chunks, then one over the partials.

A GPU runs a reduction kernel's rows in parallel, a block of rows per program. Batch norm in training reduces
each channel over N*H*W: resnet18's first one keeps 64 results of 401,408 elements each, so 64 rows, 16 programs
on a GPU of 132 multiprocessors, each looping over a quarter of a million elements. Split, the same reduction is
2,048 rows of 12,544 (the channel for each image), then 64 rows of 32: every multiprocessor streams memory, and
the second kernel reads a few kilobytes.

`plan_split` decides, from static sizes alone (a symbolic size is never split): a reduction is split when its
results number fewer than `SplitPolicy.rows` and it reduces at least `min_length` elements. The partials keep the
leading reduced dims (for NCHW batch norm: N), and where the next one is longer than needed it is cut into
`(f, size / f)` by a view, f a divisor; every partial covers at least `min_chunk` elements. A reduction across rows
(its input's stride-1 dim is kept: a weight's gradient summed over tokens, NHWC statistics) runs `column_rows`
results a program, so it wants that many times the rows, and its partials may be as short as `min_column_chunk`.

`split_reduction` lowers the split form through the context (so the scheduler fuses the first half with what
produces its input, as any reduction): sum, max, min, any and all reduce the partials with the same op;
Welford's (mean, m2) combines equal-sized chunks by Chan's formula, mean = mean of the means and
m2 = sum of the m2 + chunk * sum((mean_i - mean)^2), both plain sums in the accumulation dtype. Partials are kept
in the accumulation dtype (float32 for float16/bfloat16), so nothing is rounded twice. Products and arg-reductions
are not split.

Which codegens want this is theirs to say (`Capabilities.split_reductions`): the Triton codegen does; the C++
codegen, whose threads take rows too but far fewer at a time, does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

import sympy

from ._loop_ir import Op

if TYPE_CHECKING:  # the context calls into this module; it only uses the context's methods
    from ._context import LoweringContext, TensorRef

SPLIT_OPS = (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_ANY, Op.REDUCE_ALL, Op.REDUCE_WELFORD)


@dataclass(frozen=True)
class SplitPolicy:
    """Split a reduction with fewer than `rows` results that reduces at least `min_length` elements into at least
    `rows` partial rows (or as many as keep each at `min_chunk` elements or more)."""

    rows: int = 2048
    min_length: int = 4096
    min_chunk: int = 1024
    # a reduction across rows (its input's stride-1 dim is kept: a weight's gradient) runs `column_rows` results a
    # program, so it wants that many times the rows; its partials may be shorter, `min_column_chunk`
    column_rows: int = 64
    min_column_chunk: int = 256

    def fact(self) -> str:
        """The policy as a plan-cache fact."""
        return (f"rows={self.rows} min_length={self.min_length} min_chunk={self.min_chunk} "
                f"column_rows={self.column_rows} min_column_chunk={self.min_column_chunk}")


@dataclass(frozen=True)
class Split:
    """How one reduction splits: dim `cut` of the input (if not None) is viewed as `(factor, size / factor)`;
    `kept` are the reduced dims the partials keep (in the view's numbering), `inner` the ones they reduce."""

    shape: tuple[int, ...]  # the view's shape
    cut: int | None
    factor: int
    kept: tuple[int, ...]
    inner: tuple[int, ...]

    @property
    def parts(self) -> int:
        return prod(self.shape[d] for d in self.kept)


def plan_split(shape: tuple[sympy.Expr, ...], dims: list[int], policy: SplitPolicy,
               across: bool = False) -> Split | None:
    """The split of a reduction of a tensor of `shape` over `dims` (sorted), or None to reduce it in one go;
    `across`: the reduction reads across rows (its input's stride-1 dim is one it keeps)."""
    if not all(isinstance(s, (int, sympy.Integer)) for s in shape):
        return None
    sizes = [int(s) for s in shape]
    results = prod(sizes[k] for k in range(len(sizes)) if k not in dims)
    length = prod(sizes[d] for d in dims)
    rows = policy.rows * (policy.column_rows if across else 1)
    chunk = policy.min_column_chunk if across else policy.min_chunk
    if results >= rows or length < (2 * chunk if across else policy.min_length):
        return None
    want = min(-(-rows // results), length // chunk)
    if want < 2:
        return None
    kept: list[int] = []
    parts, cut, factor = 1, None, 1
    for d in dims:
        if sizes[d] == 1:
            continue
        if parts * sizes[d] <= want:
            kept.append(d)
            parts *= sizes[d]
            continue
        factor = max(f for f in range(1, want // parts + 1) if sizes[d] % f == 0)
        cut = d if factor > 1 else None
        break
    if parts * factor < 2:
        return None
    if cut is None:  # whole dims kept, no view
        return Split(tuple(sizes), None, 1, tuple(kept), tuple(d for d in dims if d not in kept))
    view = sizes[:cut] + [factor, sizes[cut] // factor] + sizes[cut + 1:]
    shifted = lambda d: d if d < cut else d + 1  # noqa: E731 - the view's number of an input dim after the cut
    return Split(tuple(view), cut, factor, (*kept, cut),
                 tuple(shifted(d) for d in dims if d not in kept and d != cut) + (cut + 1,))


PASS_ID = "split-reductions"  # the decisions' pass id (lowering makes them, not a scheduler pass)
REASONS = frozenset({"few-results", "across-rows"})


def split_reduction(ctx: LoweringContext, op: Op, x: TensorRef, dims: list[int], keepdim: bool, dtype: str,
                    acc: str, prologue, split: Split, across: bool = False) -> TensorRef | tuple[TensorRef, ...]:
    """The reduction of x over `dims` lowered as `split` says: what `ctx.reduction` would return. The choice is
    recorded in `ctx.decisions` (verdict `split`, reason `few-results` or `across-rows`)."""
    chunk = prod(split.shape[d] for d in split.inner)
    results = prod(int(s) for k, s in enumerate(x.shape) if k not in dims)
    ctx.decide(PASS_ID, REASONS, "split", "across-rows" if across else "few-results", ctx.origin or (x.buffer,),
               f"{op.value} of {'x'.join(str(s) for s in x.shape)} over dims {list(dims)}: {results} results, "
               f"{split.parts} partials of {chunk} each, then one reduction of the partials")
    shift = None
    if op is Op.REDUCE_WELFORD:  # moments of x - shift: small numbers, whose means float32 holds to the last bits
        shift, x = _shifted(ctx, x, dims, acc)
    xv = x if split.cut is None else x.view(split.shape, _uncut(split))
    reduced = sorted(split.kept + split.inner)
    partial = ctx.reduction(op, xv, list(split.inner), True, acc, acc=acc, prologue=prologue, split=False)
    if op is Op.REDUCE_WELFORD:
        mean, m2 = _combine_moments(ctx, partial, reduced, split, acc)
        mean = ctx.pointwise(lambda b, m, k: m + k, [mean, shift], mean.shape, acc)
        results = [mean, m2] if dtype == acc else [_cast(ctx, t, dtype) for t in (mean, m2)]
    else:
        results = [ctx.reduction(op, partial, reduced, False, dtype, acc=acc, split=False)]
    results = [_restore(r, x, dims) if keepdim else r for r in results]
    return results[0] if len(results) == 1 else tuple(results)


def _shifted(ctx: LoweringContext, x: TensorRef, dims: list[int], acc: str) -> tuple[TensorRef, TensorRef]:
    """(k, x - k) in `acc`, k each row's first element (0 where it is not finite), shaped as the reduction's results.

    Chan's formula adds `chunk * (mean_i - mean)^2` over the parts: each mean_i rounded to float32 moves it by
    `2 * chunk * |mean_i - mean| * ulp(mean_i)`, which for data far from 0 (a mean of 1000, a spread of 1) costs
    the variance ten times eager's error. About a value of its own row, each mean_i is small and holds its bits."""
    keep = [k for k in range(x.rank) if k not in dims]
    first = x.view([x.shape[k] for k in keep], lambda v: _scatter(v, keep, x.rank))
    shift = ctx.pointwise(lambda b, v: b.where(b.isnan(b.cast(v, acc) - b.cast(v, acc)), 0.0, b.cast(v, acc)),
                          [first], first.shape, acc)
    row = shift.view([1 if k in dims else x.shape[k] for k in range(x.rank)], lambda v: [v[k] for k in keep])
    return shift, ctx.pointwise(lambda b, v, k: b.cast(v, acc) - k, [x, row], x.shape, acc)


def _combine_moments(ctx: LoweringContext, partial: tuple[TensorRef, TensorRef], reduced: list[int], split: Split,
                     acc: str) -> tuple[TensorRef, TensorRef]:
    """(mean, m2) over every part from each part's (mean, m2), all parts of one size; keepdim-shaped (the view's
    rank), then without the reduced dims."""
    means, m2s = partial
    parts = split.parts
    chunk = prod(split.shape[d] for d in split.inner)
    total = ctx.reduction(Op.REDUCE_SUM, means, reduced, True, acc, acc=acc, split=False)
    mean = ctx.pointwise(lambda b, s: s / parts, [total], total.shape, acc)
    spread = ctx.pointwise(lambda b, m, mu: (m - mu) * (m - mu), [means, mean], means.shape, acc)
    between = ctx.reduction(Op.REDUCE_SUM, spread, reduced, True, acc, acc=acc, split=False)
    within = ctx.reduction(Op.REDUCE_SUM, m2s, reduced, True, acc, acc=acc, split=False)
    m2 = ctx.pointwise(lambda b, w, d: w + d * chunk, [within, between], within.shape, acc)
    keep = [k for k in range(len(split.shape)) if k not in reduced]
    mean, m2 = (t.view([t.shape[k] for k in keep], lambda v: _scatter(v, keep, len(split.shape)))
                for t in (mean, m2))
    return mean, m2


def _uncut(split: Split):
    """Index into the input of element v of the cut view."""
    cut, inner = split.cut, split.shape[split.cut + 1]
    return lambda v: [*v[:cut], v[cut] * inner + v[cut + 1], *v[cut + 2:]]


def _scatter(v, keep: list[int], rank: int) -> list:
    """A full-rank index with `v` at positions `keep` and 0 elsewhere."""
    out = [sympy.Integer(0)] * rank
    for k, e in zip(keep, v):
        out[k] = e
    return out


def _restore(t: TensorRef, x: TensorRef, dims: list[int]) -> TensorRef:
    """t (x without `dims`) as keepdim=True shapes it: size 1 at each reduced dim."""
    keep = [k for k in range(x.rank) if k not in dims]
    shape = [sympy.Integer(1) if k in dims else x.shape[k] for k in range(x.rank)]
    return t.view(shape, lambda v: [v[k] for k in keep])


def _cast(ctx: LoweringContext, t: TensorRef, dtype: str) -> TensorRef:
    return ctx.pointwise(lambda b, v: v, [t], t.shape, dtype)
