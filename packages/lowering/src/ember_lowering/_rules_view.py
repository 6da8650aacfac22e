"""Lowering rules of views: index arithmetic on a `TensorRef`, never a copy.

view/reshape map the row-major linear index (dims grouped where sizes allow, so most views need no
division); permute, transpose, expand, squeeze, unsqueeze, slice, select, diagonal, flip remap dims;
as_strided is the one view of storage rather than of elements, so it becomes a `view` buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy
from ember_core import Node

from ._context import LoweringContext, TensorRef
from ._errors import Unsupported
from ._indexing import ONE, ZERO, linear_index, to_expr

Expr = sympy.Expr


def reshape_index(ctx: LoweringContext, src: Sequence[Expr], dst: Sequence[Expr], v: Sequence[Expr]) -> list[Expr]:
    """Index into a tensor of shape `src` of element `v` of its reshape to `dst` (row-major order)."""
    if any(d == 0 for d in (*src, *dst)):
        return [ZERO] * len(src)
    out: list[Expr] = [ZERO] * len(src)
    ins = [k for k, d in enumerate(src) if d != 1]
    outs = [k for k, d in enumerate(dst) if d != 1]
    for gin, gout in _groups(ctx, [src[k] for k in ins], [dst[k] for k in outs]):
        linear = linear_index([v[outs[k]] for k in gout], [dst[outs[k]] for k in gout])
        sizes = [src[ins[k]] for k in gin]
        for j, k in enumerate(gin):
            inner = sympy.Mul(*sizes[j + 1:]) if j + 1 < len(sizes) else ONE
            e = sympy.floor(linear / inner) if inner != 1 else linear
            out[ins[k]] = sympy.Mod(e, sizes[j]) if j > 0 else e
    return out


def _groups(ctx: LoweringContext, src: list[Expr], dst: list[Expr]) -> list[tuple[list[int], list[int]]]:
    """Split two shapes of equal numel into runs of dims with equal products (one run if sizes are symbolic
    in a way the hints cannot untangle)."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj, pi, pj = [], [], ONE, ONE
        while True:
            if (not gi or ctx.hint(pi) < ctx.hint(pj)) and i < len(src):
                gi.append(i)
                pi *= src[i]
                i += 1
            elif j < len(dst) and (not gj or ctx.hint(pj) < ctx.hint(pi)):
                gj.append(j)
                pj *= dst[j]
                j += 1
            else:
                break
            if gi and gj and ctx.hint(pi) == ctx.hint(pj):
                break
        if sympy.expand(pi - pj) != 0:
            return [(list(range(len(src))), list(range(len(dst))))]
        groups.append((gi, gj))
    return groups


def _norm(d: int, rank: int) -> int:
    return d % rank if rank else 0


# ---------------------------------------------------------------------------------------------- rules


def _reshape(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    shape = ctx.shape_of(node.outputs[0])
    return x.view(shape, lambda v: reshape_index(ctx, x.shape, shape, v))


def _permute(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    dims = [_norm(d, x.rank) for d in a["dims"]]
    return x.view([x.shape[d] for d in dims], lambda v: [v[dims.index(k)] for k in range(x.rank)])


def _transpose(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    dims = list(range(x.rank))
    if x.rank >= 2:
        d0, d1 = (_norm(a["dim0"], x.rank), _norm(a["dim1"], x.rank)) if "dim0" in a else (0, 1)
        dims[d0], dims[d1] = dims[d1], dims[d0]
    return x.view([x.shape[d] for d in dims], lambda v: [v[dims.index(k)] for k in range(x.rank)])


def _expand(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    shape = ctx.shape_of(node.outputs[0])
    lead = len(shape) - x.rank
    return x.view(shape, lambda v: [ZERO if x.shape[j] == 1 and shape[j + lead] != 1 else v[j + lead]
                                    for j in range(x.rank)])


def _unsqueeze(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    d = _norm(a["dim"], x.rank + 1)
    return x.view([*x.shape[:d], ONE, *x.shape[d:]], lambda v: [*v[:d], *v[d + 1:]])


def drop_dims(t: TensorRef, dims: Sequence[int]) -> TensorRef:
    """A view of t without its size-1 dims `dims` (keepdim → not keepdim)."""
    kept = [k for k in range(t.rank) if k not in dims]

    def index_of(v):
        it = iter(v)
        return [ZERO if k in dims else next(it) for k in range(t.rank)]
    return t.view([t.shape[k] for k in kept], index_of)


def _squeeze(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    dims = a.get("dim", a.get("dims"))
    dims = range(x.rank) if dims is None else [dims] if isinstance(dims, int) else dims
    return drop_dims(x, {_norm(d, x.rank) for d in dims if x.rank and x.shape[_norm(d, x.rank)] == 1})


def _slice(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    d = _norm(a["dim"], x.rank)
    start, step = ctx.slice_start(ctx.scalar(a.get("start")), x.shape[d]), ctx.scalar(a.get("step")) or 1
    shape = ctx.shape_of(node.outputs[0])
    return x.view(shape, lambda v: [start + step * v[k] if k == d else v[k] for k in range(x.rank)])


def _select(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    d = _norm(a["dim"], x.rank)
    index = to_expr(ctx.scalar(a["index"]))
    if ctx.from_end(index, x.shape[d]):
        index = index + x.shape[d]
    return x.view([*x.shape[:d], *x.shape[d + 1:]], lambda v: [*v[:d], index, *v[d:]])


def _diagonal(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    offset, d1, d2 = a.get("offset", 0), _norm(a.get("dim1", 0), x.rank), _norm(a.get("dim2", 1), x.rank)
    rest = [k for k in range(x.rank) if k not in (d1, d2)]

    def index_of(v):
        idx = [ZERO] * x.rank
        for k, j in zip(rest, v):
            idx[k] = j
        idx[d1], idx[d2] = v[-1] + max(-offset, 0), v[-1] + max(offset, 0)
        return idx
    return x.view(ctx.shape_of(node.outputs[0]), index_of)


def _flip(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    dims = {_norm(d, x.rank) for d in a["dims"]}
    view = x.view(x.shape, lambda v: [x.shape[k] - 1 - v[k] if k in dims else v[k] for k in range(x.rank)])
    return ctx.pointwise(lambda b, t: t, [view], x.shape, x.dtype)


def _identity(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    return ctx.tensor(a["self"])


def _split(ctx: LoweringContext, node: Node, a: dict) -> list[TensorRef]:
    x = ctx.tensor(a["self"])
    d = _norm(a.get("dim", 0), x.rank)
    outs, start = [], ZERO
    for name in node.outputs:
        shape = ctx.shape_of(name)
        outs.append(x.view(shape, lambda v, s=start: [s + v[k] if k == d else v[k] for k in range(x.rank)]))
        start = start + shape[d]
    return outs


def _unbind(ctx: LoweringContext, node: Node, a: dict) -> list[TensorRef]:
    x = ctx.tensor(a["self"])
    d = _norm(a.get("dim", 0), x.rank)
    shape = [*x.shape[:d], *x.shape[d + 1:]]
    return [x.view(shape, lambda v, i=i: [*v[:d], to_expr(i), *v[d:]]) for i in range(len(node.outputs))]


def _as_strided(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x = ctx.tensor(a["self"])
    root = ctx.buffers[x.buffer]
    root = ctx.buffers[root.base] if root.kind == "view" else root
    value = ctx.values.get(root.name)
    if value is None or tuple(to_expr(s) for s in value.stride) != root.stride:
        raise Unsupported("as_strided of a buffer laid out other than the graph records")
    out = ctx.values[node.outputs[0]]
    offset = sympy.expand(to_expr(out.storage_offset) - to_expr(value.storage_offset))
    name = ctx.new_buffer(out.shape, root.dtype, kind="view", stride=out.stride, offset=offset, base=root.name,
                          name=node.outputs[0] if node.outputs[0] not in ctx.buffers else None)
    return ctx.identity(name)


def _copying(view: Callable) -> Callable:
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        t = view(ctx, node, a)
        return ctx.pointwise(lambda b, v: v, [t], t.shape, t.dtype)
    return rule


view_rules: dict[str, Callable] = {
    "aten.view.default": _reshape, "aten._unsafe_view.default": _reshape, "aten.reshape.default": _reshape,
    "aten.permute.default": _permute, "aten.transpose.int": _transpose, "aten.t.default": _transpose,
    "aten.expand.default": _expand, "aten.unsqueeze.default": _unsqueeze,
    "aten.squeeze.dim": _squeeze, "aten.squeeze.dims": _squeeze, "aten.squeeze.default": _squeeze,
    "aten.slice.Tensor": _slice, "aten.select.int": _select, "aten.diagonal.default": _diagonal,
    "aten.alias.default": _identity, "aten.detach.default": _identity,
    "aten.split.Tensor": _split, "aten.split_with_sizes.default": _split, "aten.unbind.int": _unbind,
    "aten.as_strided.default": _as_strided, "aten.flip.default": _flip,
    "aten.view_copy.default": _copying(_reshape), "aten.permute_copy.default": _copying(_permute),
    "aten.expand_copy.default": _copying(_expand), "aten.unsqueeze_copy.default": _copying(_unsqueeze),
    "aten.squeeze_copy.dims": _copying(_squeeze), "aten.slice_copy.Tensor": _copying(_slice),
    "aten.select_copy.int": _copying(_select), "aten.transpose_copy.int": _copying(_transpose),
}
