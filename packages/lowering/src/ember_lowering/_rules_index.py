"""Lowering rules of data movement and factories: cat, constant padding, gather / index_select / index /
embedding (indirect loads: an index expression that uses a loaded value), slice_scatter / select_scatter, scatter
and scatter_add with one index per line, and full / zeros / ones / *_like / scalar_tensor / arange / iota.

cat and padding are one pointwise kernel each, reading their inputs through masked loads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
from ember_core import Node

from ._builder import KernelBuilder, Val
from ._context import LoweringContext, TensorRef
from ._errors import Unsupported
from ._fusion import step_writes
from ._indexing import ZERO, sym, to_expr
from ._loop_ir import FLOAT_DTYPES, Kernel, opmath

Expr = sympy.Expr


def _out(ctx: LoweringContext, node: Node, k: int = 0):
    return ctx.shape_of(node.outputs[k]), ctx.values[node.outputs[k]].dtype


def _kernel(ctx: LoweringContext, shape: Sequence[Expr], dtype: str, fn: Callable[[KernelBuilder, list], Val]):
    """A pointwise kernel whose body `fn(b, idx)` sees the output index, for rules that index their inputs."""
    dims, idx = ctx.dims_for(shape)
    b = ctx.builder(dims)
    result = b.cast(b.lift(fn(b, idx), dtype), dtype)
    out = ctx.new_buffer(shape, dtype)
    b.store(out, idx, result)
    ctx.add_kernel(b)
    return ctx.identity(out)


def _and(b: KernelBuilder, masks: list[Val]) -> Val | None:
    out = None
    for m in masks:
        out = m if out is None else b.and_(out, m)
    return out


def _index_value(ctx: LoweringContext, b: KernelBuilder, t: TensorRef, idx: Sequence[Expr], size: Expr,
                 wrap: bool, mask: Val | None = None) -> Expr:
    """An index read from tensor t (wrapped if negative), as an expression usable in a load."""
    v = b.cast(ctx.load(b, t, idx, mask), "int64")
    if wrap:
        v = b.where(v.lt(0), v + b.lift(size, "int64"), v)
    return sym(v.name)


# ---------------------------------------------------------------------------------------------- cat, pad


MAX_CAT_PIECES = 8  # more, and a cat is ATen's: one copy per piece (each element here selects among all of them)


def _cat(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    shape, dtype = _out(ctx, node)
    parts = [ctx.tensor(t) for t in a["tensors"]]
    parts = [t for t in parts if not (t.rank == 1 and t.shape[0] == 0 and len(shape) != 1)]
    d = a.get("dim", 0) % len(shape)
    offsets, acc = [], ZERO
    for t in parts:
        offsets.append(acc)
        acc = acc + t.shape[d]
    parts = [(t, o) for t, o in zip(parts, offsets) if t.shape[d] != 0]
    if len(parts) > MAX_CAT_PIECES:
        raise Unsupported(f"a cat of {len(parts)} pieces: ATen copies each piece once, where a kernel would test "
                          "every piece at every element")

    def fn(b: KernelBuilder, idx: list) -> Val:
        pos = b.index(idx[d])
        result = None
        for k, (t, o) in reversed(list(enumerate(parts))):
            shifted = [e - o if j == d else e for j, e in enumerate(idx)]
            lo = pos.ge(b.lift(o, "int64")) if k > 0 else None
            hi = pos.lt(b.lift(o + t.shape[d], "int64")) if k < len(parts) - 1 else None
            mask = _and(b, [m for m in (lo, hi) if m is not None])
            v = b.cast(ctx.load(b, t, shifted, mask), dtype)
            result = v if result is None else b.where(hi, v, result)
        return result if result is not None else b.const(0, dtype)
    return _kernel(ctx, shape, dtype, fn)


def _constant_pad(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    shape, dtype = _out(ctx, node)
    pad = [to_expr(ctx.scalar(p)) for p in a["pad"]]
    value = a.get("value", 0)

    def fn(b: KernelBuilder, idx: list) -> Val:
        src, masks = list(idx), []
        for j in range(len(pad) // 2):
            d = len(shape) - 1 - j
            lo, hi = pad[2 * j], pad[2 * j + 1]
            src[d] = idx[d] - lo
            if not (lo.is_number and lo <= 0):
                masks.append(b.index(src[d]).ge(b.const(0, "int64")))
            if not (hi.is_number and hi <= 0):
                masks.append(b.index(src[d]).lt(b.lift(x.shape[d], "int64")))
        mask = _and(b, masks)
        v = b.cast(ctx.load(b, x, src, mask), dtype)
        return v if mask is None else b.where(mask, v, value)
    return _kernel(ctx, shape, dtype, fn)


# ---------------------------------------------------------------------------------------------- gathers


def _load_along(ctx: LoweringContext, node: Node, a: dict, index_at) -> TensorRef:
    """out[idx] = self[idx with dim d replaced by index[index_at(idx, d)]]: gather and index_select alike."""
    x, index = ctx.tensor(a["self"]), ctx.tensor(a["index"])
    shape, dtype = _out(ctx, node)
    d = a["dim"] % max(x.rank, 1)

    def fn(b: KernelBuilder, idx: list) -> Val:
        src = list(idx)
        if x.rank:
            src[d] = _index_value(ctx, b, index, index_at(idx, d, index), x.shape[d], wrap=False)
        return ctx.load(b, x, src)
    return _kernel(ctx, shape, dtype, fn)


def _gather(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    return _load_along(ctx, node, a, lambda idx, d, index: idx)


def _index_select(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    return _load_along(ctx, node, a, lambda idx, d, index: [idx[d]] if index.rank else [])


def _embedding(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    w, index = ctx.tensor(a["weight"]), ctx.tensor(a["indices"])
    shape, dtype = _out(ctx, node)

    def fn(b: KernelBuilder, idx: list) -> Val:
        row = _index_value(ctx, b, index, idx[:-1], w.shape[0], wrap=False)
        return ctx.load(b, w, [row, idx[-1]])
    return _kernel(ctx, shape, dtype, fn)


def _index(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    """x[i0, None, i2 ...]: advanced indexing with integer index tensors (broadcast together)."""
    x = ctx.tensor(a["self"])
    shape, dtype = _out(ctx, node)
    indices = list(a["indices"]) + [None] * (x.rank - len(a["indices"]))
    used = [k for k, t in enumerate(indices) if t is not None]
    tensors = {k: ctx.tensor(indices[k]) for k in used}
    if any(t.dtype in ("bool", "uint8") for t in tensors.values()):
        raise Unsupported("boolean mask indexing has a data-dependent shape")
    nb = max(t.rank for t in tensors.values())
    adjacent = used == list(range(used[0], used[-1] + 1))
    start = used[0] if adjacent else 0

    def fn(b: KernelBuilder, idx: list) -> Val:
        bidx = idx[start:start + nb]
        rest = iter(idx[:start] + idx[start + nb:])
        src = []
        for k in range(x.rank):
            if k in tensors:
                src.append(_index_value(ctx, b, tensors[k], bidx, x.shape[k], wrap=True))
            else:
                src.append(next(rest))
        return ctx.load(b, x, src)
    return _kernel(ctx, shape, dtype, fn)


# ---------------------------------------------------------------------------------------------- scatters


def _slice_scatter(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x, src = ctx.tensor(a["self"]), ctx.tensor(a["src"])
    shape, dtype = _out(ctx, node)
    d = a.get("dim", 0) % x.rank
    start = ctx.slice_start(ctx.scalar(a.get("start")), x.shape[d])
    step = to_expr(ctx.scalar(a.get("step")) or 1)
    if start == 0 and step == 1 and to_expr(src.shape[d]) == to_expr(x.shape[d]):
        # the source covers the whole dim (a gradient written into zeros): the result is the source, with no
        # position test (a masked load keeps its value from being forwarded and its loop from folding)
        return _kernel(ctx, shape, dtype, lambda b, idx: b.cast(ctx.load(b, src, idx), dtype))

    def fn(b: KernelBuilder, idx: list) -> Val:
        pos = b.index(idx[d] - start)
        inside = b.and_(pos.ge(b.const(0, "int64")), pos.lt(b.lift(src.shape[d] * step, "int64")))
        if step != 1:
            inside = b.and_(inside, b.mod(pos, b.lift(step, "int64")).eq(b.const(0, "int64")))
        inner = [sympy.floor((e - start) / step) if j == d else e for j, e in enumerate(idx)]
        v = b.cast(ctx.load(b, src, inner, inside), dtype)
        return b.where(inside, v, b.cast(ctx.load(b, x, idx), dtype))
    return _kernel(ctx, shape, dtype, fn)


def _select_scatter(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x, src = ctx.tensor(a["self"]), ctx.tensor(a["src"])
    shape, dtype = _out(ctx, node)
    d = a["dim"] % x.rank
    index = to_expr(ctx.scalar(a["index"]))
    if ctx.from_end(index, x.shape[d]):
        index = index + x.shape[d]

    def fn(b: KernelBuilder, idx: list) -> Val:
        hit = b.index(idx[d]).eq(b.lift(index, "int64"))
        v = b.cast(ctx.load(b, src, idx[:d] + idx[d + 1:], hit), dtype)
        return b.where(hit, v, b.cast(ctx.load(b, x, idx), dtype))
    return _kernel(ctx, shape, dtype, fn)


def _scatter(how: str) -> Callable:
    """scatter.src / scatter.value / scatter_add with one index along `dim` per line of the result (the index's
    size there is 1, its other sizes the result's): element p is `self[p]`, except where p's position along `dim`
    is that line's index, which takes the source's element (added to `self[p]` by scatter_add). Autograd writes
    cross-entropy's and gather's gradients so (`scatter_add(zeros, 1, target[:, None], g)`): as a select it fuses
    with the zero fill and whatever reads it, instead of an ATen call writing the whole tensor (into the result of
    an ATen call or a reduction the ATen call stays: see `_select_pays`). The index is read through an indirect
    load of `arange(size)`, which the codegens check against its bounds as they check a gather's, so an index out
    of range raises as it does in ATen, instead of leaving the line unwritten. Any other scatter runs as an ATen
    call (several indices per line may repeat, and scatter_add would sum them)."""
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        x, index = ctx.tensor(a["self"]), ctx.tensor(a["index"])
        shape, dtype = _out(ctx, node)
        if a.get("reduce") is not None or not x.rank or index.rank != x.rank:
            raise Unsupported("a scatter with a reduce argument or of a 0-d tensor runs as an ATen call")
        d = a["dim"] % x.rank
        if index.shape[d] != 1 or any(index.shape[k] != x.shape[k] for k in range(x.rank) if k != d):
            raise Unsupported("a scatter with more than one index per line runs as an ATen call")
        if how == "add" and dtype == "bool":
            raise Unsupported("scatter_add of booleans runs as an ATen call")
        src = ctx.tensor(a["src"]) if how != "value" else None
        if src is not None and src.rank != x.rank:
            raise Unsupported("a scatter whose source has another rank runs as an ATen call")
        if not _select_pays(ctx, x):
            raise Unsupported("a scatter into the result of an ATen call or a reduction runs as an ATen call (in "
                              "place where that result dies: a few elements written, not the whole tensor)")
        positions = _iota(ctx, [x.shape[d]], "int64", 0, 1)

        def fn(b: KernelBuilder, idx: list) -> Val:
            line = [ZERO if k == d else e for k, e in enumerate(idx)]
            target = ctx.load(b, positions, [_index_value(ctx, b, index, line, x.shape[d], wrap=False)])
            hit = b.index(idx[d]).eq(target)
            math = opmath(dtype)  # float16 and bfloat16 add in float32 and round once, as ATen does
            old = b.cast(ctx.load(b, x, idx), math)
            # the source's element of the line (its sizes are at least the index's): the same at every position
            new = b.cast(b.lift(a["value"], dtype) if src is None else ctx.load(b, src, line), math)
            return b.where(hit, old + new if how == "add" else new, old)
        return _kernel(ctx, shape, dtype, fn)
    return rule


def _select_pays(ctx: LoweringContext, x: TensorRef) -> bool:
    """Is a select, which reads `self` whole and writes the whole result, no worse than ATen's scatter? Yes when
    `self` is an input or a constant (ATen copies it too) or a pointwise kernel's result (fused into the select:
    a zero fill, a scaled tensor). Not when an extern or a reduction wrote it: that stays a buffer, which
    `extern-in-place` lets the ATen call scatter into where it dies."""
    if ctx.buffers[x.buffer].kind in ("input", "constant"):
        return True
    writer = next((step for step in reversed(ctx.steps) if x.buffer in step_writes(step)), None)
    return isinstance(writer, Kernel) and not writer.reduce_dims


# ---------------------------------------------------------------------------------------------- factories


def _fill(value_key: str) -> Callable:
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        shape, dtype = _out(ctx, node)
        value = a.get(value_key, 0) if value_key else 0
        if isinstance(value, (int, float)) or value is None:
            return ctx.pointwise(lambda b: b.const(value or 0, dtype), [], shape, dtype)
        value = _input_or_scalar(ctx, value)
        return ctx.pointwise(lambda b, v: v, [value], shape, dtype)
    return rule


def _input_or_scalar(ctx: LoweringContext, v: Any) -> Any:
    try:
        return ctx.tensor(v)
    except Exception:
        return ctx.scalar(v)


def _ones(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    shape, dtype = _out(ctx, node)
    return ctx.pointwise(lambda b: b.const(1, dtype), [], shape, dtype)


def _arange(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    shape, dtype = _out(ctx, node)
    start = ctx.scalar(a.get("start")) if a.get("start") is not None else 0
    step = ctx.scalar(a.get("step")) if a.get("step") is not None else 1
    return _iota(ctx, shape, dtype, start, step)


def _prims_iota(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    shape, dtype = _out(ctx, node)
    return _iota(ctx, shape, dtype, ctx.scalar(a["start"]), ctx.scalar(a["step"]))


def _iota(ctx: LoweringContext, shape: Sequence[Expr], dtype: str, start: Any, step: Any) -> TensorRef:
    def fn(b: KernelBuilder, idx: list) -> Val:
        i = idx[0] if idx else ZERO
        if dtype not in FLOAT_DTYPES and not isinstance(start, float) and not isinstance(step, float):
            return b.index(to_expr(start) + to_expr(step) * i)
        return b.lift(start, "float64") + b.cast(b.index(i), "float64") * b.lift(step, "float64")
    return _kernel(ctx, shape, dtype, fn)


index_rules: dict[str, Callable] = {
    "aten.cat.default": _cat, "aten.constant_pad_nd.default": _constant_pad,
    "aten.gather.default": _gather, "aten.index_select.default": _index_select,
    "aten.embedding.default": _embedding, "aten.index.Tensor": _index,
    "aten.slice_scatter.default": _slice_scatter, "aten.select_scatter.default": _select_scatter,
    "aten.scatter.src": _scatter("src"), "aten.scatter.value": _scatter("value"),
    "aten.scatter_add.default": _scatter("add"),
    "aten.full.default": _fill("fill_value"), "aten.full_like.default": _fill("fill_value"),
    "aten.fill.Scalar": _fill("value"), "aten.fill.Tensor": _fill("value"),
    "aten.scalar_tensor.default": _fill("s"),
    "aten.zeros.default": _fill(""), "aten.zeros_like.default": _fill(""),
    "aten.empty.memory_format": _fill(""), "aten.empty_like.default": _fill(""),
    "aten.empty_strided.default": _fill(""), "aten.new_zeros.default": _fill(""),
    "aten.new_empty.default": _fill(""), "aten.new_empty_strided.default": _fill(""),
    "aten.new_full.default": _fill("fill_value"),
    "aten.ones.default": _ones, "aten.ones_like.default": _ones, "aten.new_ones.default": _ones,
    "aten.arange.start_step": _arange, "aten.arange.default": _arange, "aten.arange.start": _arange,
    "prims.iota.default": _prims_iota,
}
