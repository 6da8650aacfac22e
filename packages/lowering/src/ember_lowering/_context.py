"""What a lowering rule works with: `TensorRef`s (a buffer read through an index map) and the context that
creates buffers and kernels.

A `TensorRef` is a graph value as index arithmetic over a buffer: element (v0, v1, ...) of the value is
element `index` of `buffer`, where `index` is written over the view variables `_v0, _v1, ...`. Views
(permute, expand, slice, reshape ...) only change the map, never copy. Each `ctx.pointwise`/`ctx.reduction`
emits one kernel that writes one new buffer; the scheduler fuses them afterwards.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
from ember_core import INT64_MIN, Graph, Ref, Sym, as_sympy, graph_device

from ._builder import KernelBuilder, Val
from ._decisions import Decision, make_decision
from ._errors import LoweringError, Unsupported
from ._indexing import ONE, ZERO, Ranges, contiguous_strides, linear_index, simplify, sym, to_expr
from ._loop_ir import Buffer, Dim, Op
from ._split_reductions import SPLIT_OPS, SplitPolicy, plan_split, split_reduction

log = logging.getLogger("ember.kernels")

Expr = sympy.Expr


@functools.cache
def view_var(k: int) -> sympy.Symbol:
    return sympy.Symbol(f"_v{k}", integer=True)


def view_vars(n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(view_var(k) for k in range(n))


@dataclass(frozen=True, slots=True)
class TensorRef:
    """A graph value as a read of `buffer`: its element at view index v is the buffer's element `index(v)`."""

    buffer: str
    index: tuple[Expr, ...]
    shape: tuple[Expr, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def at(self, idx: Sequence[Expr]) -> tuple[Expr, ...]:
        """The buffer index of element `idx` of this value."""
        mapping = {view_var(k): as_sympy(e) for k, e in enumerate(idx)}
        return tuple(e.xreplace(mapping) for e in self.index)

    def view(self, shape: Sequence[Expr], index_of: Callable[[tuple[Expr, ...]], Sequence[Expr]]) -> TensorRef:
        """A view: `index_of(v)` gives, for element v of the view, the index into this value."""
        shape = tuple(to_expr(d) for d in shape)
        return TensorRef(self.buffer, self.at(index_of(view_vars(len(shape)))), shape, self.dtype)

    def is_identity(self, buffer: Buffer) -> bool:
        return self.index == view_vars(len(buffer.shape)) and self.shape == buffer.shape


class LoweringContext:
    """Buffers, steps and the value environment of one graph being lowered."""

    def __init__(self, graph: Graph, split: SplitPolicy | None = None):
        self.graph = graph
        self.device = graph_device(graph)
        # a number's device copy → the 0-d input it was copied from (on the CPU: ATen calls read that one)
        self.host_of: dict[str, str] = {}
        self.split = split  # long reductions with few results split in two (`_split_reductions.py`); None: never
        self.decisions: list[Decision] = []  # what lowering itself chose (split reductions), for the plan's event
        self.values = graph.values
        self.ranges = Ranges(lowers={s.name: s.lower for s in graph.symbols})
        self.hints = {s.name: s.hint for s in graph.symbols}
        self.symbols = {s.name: s for s in graph.symbols}
        self.buffers: dict[str, Buffer] = {}
        self.steps: list = []
        self.env: dict[str, Any] = {}
        self.opaque: dict[str, str] = {}  # symbolic values no rule could express → the op that made them
        self.origin: tuple[str, ...] = ()
        self._taken = set(graph.values) | set(graph.constants)
        self._count = 0

    def decide(self, pass_id: str, reasons: frozenset[str], verdict: str, reason: str, subjects: Sequence[str],
               detail: str) -> None:
        """Record a choice lowering made (as a scheduler pass records its own), logged on `ember.kernels`."""
        decision = make_decision(pass_id, reasons, verdict, reason, subjects, detail)
        log.debug("%s", decision)
        self.decisions.append(decision)

    # ------------------------------------------------------------------ names and values

    def fresh_name(self, stem: str = "buf") -> str:
        while True:
            name = f"{stem}{self._count}"
            self._count += 1
            if name not in self._taken and name not in self.buffers:
                self._taken.add(name)
                return name

    def shape_of(self, name: str) -> tuple[Expr, ...]:
        return tuple(to_expr(d) for d in self.values[name].shape)

    def tensor(self, arg: Any) -> TensorRef:
        if not isinstance(arg, Ref) or not isinstance(self.env.get(arg.name), TensorRef):
            raise LoweringError(f"expected a tensor value, got {arg!r}")
        return self.env[arg.name]

    def scalar(self, arg: Any) -> Any:
        """A Python number, or a sympy expression for a symbolic int."""
        if isinstance(arg, Ref):
            value = self.env.get(arg.name)
            if self.read_at_run_time(arg.name):
                raise LoweringError(self.run_time_number(arg.name, "as an integer (a size, an index, an offset)"))
            if isinstance(value, TensorRef) or value is None:
                raise LoweringError(f"expected a scalar, got tensor value {arg.name!r}")
            return value
        if isinstance(arg, Sym):
            return to_expr(arg.expr)
        return arg

    def from_end(self, index: Any, size: Any) -> bool:
        """Whether an index or start (select's, slice's, their scatters') is negative: ATen then counts it from the
        end of a dim of `size`. A symbolic one is an int the program passed, whose sign Dynamo guards when it traces
        such an op, so its symbols' ranges tell it; where they leave it open the op runs as an ATen call."""
        index = to_expr(index)
        if index.is_number:
            return bool(index < 0)
        lo, hi = self._interval(sympy.expand(index))
        if lo is not None and lo >= 0:
            return False
        if hi is not None and hi < 0:
            return True
        raise Unsupported(f"the sign of index {index} is not known from its symbols' ranges")

    def slice_start(self, start: Any, size: Any) -> Any:
        """Where a slice (or its scatter) of a dim of `size` begins, as ATen takes `start`: a negative one counts from
        the end and stops at the first element (`x[:, -3:]` of 2 columns is both). A start past the end makes an
        empty slice, which nothing reads or writes, so it stays as it is."""
        start = to_expr(0 if start is None else start)
        if not self.from_end(start, size):
            return start
        start = start + to_expr(size)
        return max(start, ZERO) if start.is_number else sympy.Max(start, 0)

    def _interval(self, expr: Any) -> tuple[Any, Any]:
        """Bounds of a linear expression over graph symbols from their declared ranges (None: unbounded)."""
        if expr.is_number:
            return expr, expr
        if isinstance(expr, sympy.Add):
            lo, hi = ZERO, ZERO
            for term in expr.args:
                tlo, thi = self._interval(term)
                lo = None if lo is None or tlo is None else lo + tlo
                hi = None if hi is None or thi is None else hi + thi
            return lo, hi
        coeff, rest = expr.as_coeff_Mul()
        symbol = self.symbols.get(getattr(rest, "name", None))
        if symbol is None or not coeff.is_number:
            return None, None
        lower = None if symbol.lower <= INT64_MIN else sympy.Integer(symbol.lower)
        upper = None if symbol.upper is None else sympy.Integer(symbol.upper)
        lo, hi = (lower, upper) if coeff >= 0 else (upper, lower)
        return (None if lo is None else coeff * lo), (None if hi is None else coeff * hi)

    def read_at_run_time(self, name: str) -> bool:
        """Is graph value `name` a number read from a 0-d tensor (`_local_scalar_dense`), which kernels read from
        the tensor (see `_lowering._scalar_tensor`), so that no symbol of the plan holds it?"""
        v = self.values.get(name)
        return v is not None and v.type != "tensor" and isinstance(self.env.get(name), TensorRef)

    def run_time_number(self, name: str, use: str) -> str:
        """Why a plan cannot use such a number `use`d other than as a kernel's operand: the reason of the
        `lowering` fallback that then runs the graph in the interpreter codegen."""
        return (f"{name!r} is a number read from a tensor at run time (aten._local_scalar_dense: `.item()`, a 0-d "
                f"tensor argument) and {', '.join(self.origin) or 'a node'} uses it {use}; a plan takes such numbers "
                "only as kernel operands, its sizes and indices only from its inputs' shapes")

    def hint(self, expr: Any) -> int:
        expr = to_expr(expr)
        return int(expr.xreplace({sym(n): h for n, h in self.hints.items()})) if not expr.is_number else int(expr)

    # ------------------------------------------------------------------ buffers and kernels

    def new_buffer(self, shape: Sequence[Expr], dtype: str, *, kind: str = "temp", stride=None, name=None,
                   offset: Expr = ZERO, base: str | None = None) -> str:
        name = name or self.fresh_name()
        shape = tuple(to_expr(d) for d in shape)
        stride = tuple(to_expr(s) for s in stride) if stride is not None else contiguous_strides(shape)
        self.buffers[name] = Buffer(name, dtype, shape, stride, kind, to_expr(offset), base)
        self._taken.add(name)
        return name

    def identity(self, buffer: str) -> TensorRef:
        b = self.buffers[buffer]
        return TensorRef(buffer, view_vars(b.rank), b.shape, b.dtype)

    def add_kernel(self, b: KernelBuilder) -> None:
        self.steps.append(b.finish(f"kernel{len(self.steps)}", self.origin))

    def dims_for(self, shape: Sequence[Expr], reduce: Sequence[int] = ()) -> tuple[list[Dim], list[Expr]]:
        """Kernel dims for a shape: one per dim of size other than 1 (`r` for those in `reduce`), and the
        expression of each shape dim (its var, or 0 for a size-1 dim)."""
        dims, idx, counts = [], [], {"i": 0, "r": 0}
        for k, size in enumerate(shape):
            if size == 1:
                idx.append(ZERO)
                continue
            prefix = "r" if k in reduce else "i"
            v = f"{prefix}{counts[prefix]}"
            counts[prefix] += 1
            dims.append(Dim(v, to_expr(size)))
            idx.append(sym(v))
        return dims, idx

    def builder(self, dims: Sequence[Dim]) -> KernelBuilder:
        return KernelBuilder(dims, self.ranges)

    def load(self, b: KernelBuilder, t: TensorRef, idx: Sequence[Expr], mask: Val | None = None, other=0) -> Val:
        """Load element `idx` of t, broadcasting: idx may have more dims than t (leading dims are dropped) and
        t's size-1 dims read index 0."""
        idx = list(idx)[len(idx) - t.rank:] if t.rank else []
        idx = [ZERO if size == 1 else e for size, e in zip(t.shape, idx)]
        return b.load(t.buffer, t.at(idx), self.buffers[t.buffer].dtype, mask, other)

    def pointwise(self, fn: Callable[..., Any], inputs: Sequence[Any], shape: Sequence[Expr], dtype: str) -> TensorRef:
        """One kernel over `shape`: `fn(b, *vals)` gets each TensorRef input loaded (broadcast, in its buffer's
        dtype) and every other input as is; its result is cast to `dtype` and stored in a new buffer."""
        shape = tuple(to_expr(d) for d in shape)
        dims, idx = self.dims_for(shape)
        b = self.builder(dims)
        vals = [self.load(b, x, idx) if isinstance(x, TensorRef) else x for x in inputs]
        result = b.lift(fn(b, *vals), dtype)
        out = self.new_buffer(shape, dtype)
        b.store(out, idx, b.cast(result, dtype, implicit=True))
        self.add_kernel(b)
        return self.identity(out)

    def reduction(self, op: Op, x: TensorRef, dims: Sequence[int], keepdim: bool, dtype: str,
                  acc: str | None = None, prologue: Callable[..., Val] | None = None, split: bool = True):
        """One reduction kernel of x over `dims` (empty: all). Loads are cast to `acc` (or `prologue(b, val)`
        applied); returns the result (two for welford: mean, m2) as new buffers of dtype `dtype`. Under a split
        policy (and `split`), a long reduction with few results is two reductions (`_split_reductions.py`)."""
        n = x.rank
        dims = sorted({d % n for d in dims} if n else set()) if dims else list(range(n))
        if split and self.split is not None and op in SPLIT_OPS and not (prologue and op is Op.REDUCE_WELFORD):
            across = self.reads_across(x, dims)
            how = plan_split(x.shape, dims, self.split, across)
            if how is not None:
                return split_reduction(self, op, x, dims, keepdim, dtype, acc or x.dtype, prologue, how, across)
        kdims, idx = self.dims_for(x.shape, reduce=dims)
        b = self.builder(kdims)
        if not any(d.reduce for d in kdims):  # every reduced dim has size 1: nothing to reduce
            v = self.load(b, x, idx)
            v = prologue(b, v) if prologue else b.cast(v, acc or v.dtype)
            results = _trivial_reduction(b, op, v)
        else:
            with b.loop():
                v = self.load(b, x, idx)
                v = prologue(b, v) if prologue else b.cast(v, acc or v.dtype)
                if op in (Op.REDUCE_ARGMAX, Op.REDUCE_ARGMIN):
                    linear = linear_index([idx[d] for d in dims], [x.shape[d] for d in dims])
                    results = (b.reduce(op, v, b.index(linear)),)
                else:
                    results = b.reduce(op, v)
                    results = results if isinstance(results, tuple) else (results,)
        out_shape = [ONE if k in dims else x.shape[k] for k in range(n)] if keepdim else \
            [x.shape[k] for k in range(n) if k not in dims]
        out_idx = [ZERO if k in dims else idx[k] for k in range(n)] if keepdim else \
            [idx[k] for k in range(n) if k not in dims]
        refs = []
        for r in results:
            out = self.new_buffer(out_shape, dtype)
            b.store(out, out_idx, b.cast(r, dtype))
            refs.append(self.identity(out))
        self.add_kernel(b)
        return refs[0] if len(refs) == 1 else tuple(refs)

    # ------------------------------------------------------------------ views and materialization

    def materialize(self, t: TensorRef, name: str | None = None) -> str:
        """A buffer holding t: its own buffer, a `view` buffer when t is a strided view of storage, or a copy."""
        root = self.buffers[t.buffer]
        if t.is_identity(root):
            return t.buffer
        layout = self.strided_layout(t)
        if layout is not None:
            stride, offset = layout
            base = root.base if root.kind == "view" else root.name
            return self.new_buffer(t.shape, root.dtype, kind="view", stride=stride, name=name, offset=offset,
                                   base=base)
        return self.pointwise(lambda b, v: v, [t], t.shape, t.dtype).buffer

    def reads_across(self, t: TensorRef, dims: Sequence[int]) -> bool:
        """Does a reduction of t over `dims` read across rows: is t's stride-1 dim (in its buffer's layout) kept?"""
        layout = self.strided_layout(t)
        if layout is None:
            return False
        return any(stride == 1 and k not in dims and t.shape[k] != 1 for k, stride in enumerate(layout[0]))

    def strided_layout(self, t: TensorRef) -> tuple[tuple[Expr, ...], Expr] | None:
        """(strides, offset) of t over its buffer's storage when that is affine in the view index, else None."""
        root = self.buffers[t.buffer]
        vs = view_vars(t.rank)
        ranges = self.ranges.with_sizes({v.name: s for v, s in zip(vs, t.shape)})
        flat = root.offset + sum((e * s for e, s in zip(t.index, root.stride)), ZERO)
        flat = simplify(sympy.expand(flat), ranges)
        strides = []
        for v in vs:
            coeff = flat.coeff(v)
            if coeff.free_symbols & set(vs):
                return None
            strides.append(coeff)
        offset = sympy.expand(flat - sum((c * v for c, v in zip(strides, vs)), ZERO))
        if offset.free_symbols & set(vs):
            return None
        return tuple(sympy.expand(s) for s in strides), offset


def _trivial_reduction(b: KernelBuilder, op: Op, v: Val) -> tuple[Val, ...]:
    """The reduction of a single element."""
    if op in (Op.REDUCE_ARGMAX, Op.REDUCE_ARGMIN):
        return (b.const(0, "int64"),)
    if op is Op.REDUCE_WELFORD:
        return v, b.const(0, v.dtype)
    if op in (Op.REDUCE_ANY, Op.REDUCE_ALL):
        return (b.cast(v, "bool"),)
    return (v,)
