"""Building kernel bodies: SSA names, common-subexpression reuse, and `Val` arithmetic for lowering rules.

    b = KernelBuilder(dims, ranges)
    with b.loop():
        x = b.load("x_1", (i0, r0), "float32")
        m = b.reduce(Op.REDUCE_MAX, x)
    b.store("out", (i0,), b.exp(m) * 2.0)
    kernel = b.finish("k", origins=("amax",))
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import sympy
import torch
from ember_core import as_sympy, to_dtype

from ._errors import Unsupported
from ._indexing import Ranges, simplify
from ._loop_ir import (
    ARITY,
    COMPARISONS,
    IMPLICIT_CAST,
    POINTWISE,
    PREDICATES,
    REDUCTIONS,
    Dim,
    Instr,
    Kernel,
    Loop,
    Op,
    scalar_of,
)
from ._op_semantics import SEMANTICS
from ._reduction_semantics import REDUCTION_SEMANTICS
from ._rewrite import canonicalize


class Val:
    """An SSA value being built, with Python operators that emit instructions (scalars become consts)."""

    __slots__ = ("b", "name", "dtype")

    def __init__(self, b: KernelBuilder, name: str, dtype: str):
        self.b, self.name, self.dtype = b, name, dtype

    def __repr__(self) -> str:
        return f"Val({self.name}: {self.dtype})"

    def _bin(self, op: Op, other: Any, swap: bool = False) -> Val:
        other = self.b.lift(other, self.dtype)
        return self.b.emit(op, other, self) if swap else self.b.emit(op, self, other)

    def __add__(self, o): return self._bin(Op.ADD, o)
    def __radd__(self, o): return self._bin(Op.ADD, o, True)
    def __sub__(self, o): return self._bin(Op.SUB, o)
    def __rsub__(self, o): return self._bin(Op.SUB, o, True)
    def __mul__(self, o): return self._bin(Op.MUL, o)
    def __rmul__(self, o): return self._bin(Op.MUL, o, True)
    def __truediv__(self, o): return self._bin(Op.DIV, o)
    def __rtruediv__(self, o): return self._bin(Op.DIV, o, True)
    def __floordiv__(self, o): return self._bin(Op.FLOORDIV, o)
    def __mod__(self, o): return self._bin(Op.MOD, o)
    def __pow__(self, o): return self._bin(Op.POW, o)
    def __neg__(self): return self.b.emit(Op.NEG, self)
    def lt(self, o): return self._bin(Op.LT, o)
    def le(self, o): return self._bin(Op.LE, o)
    def gt(self, o): return self._bin(Op.GT, o)
    def ge(self, o): return self._bin(Op.GE, o)
    def eq(self, o): return self._bin(Op.EQ, o)
    def ne(self, o): return self._bin(Op.NE, o)


class KernelBuilder:
    """Emits the body of one kernel over `dims`. Index expressions are simplified with the dims' ranges. Values are
    named `t0, t1, ...`, or `<prefix>0, ...` to emit instructions that go into a kernel already built."""

    def __init__(self, dims: Sequence[Dim], ranges: Ranges | None = None, prefix: str = "t"):
        self.dims, self.prefix = tuple(dims), prefix
        self.ranges = (ranges or Ranges()).with_sizes({d.var: d.size for d in self.dims})
        self.body: list = []
        self._loop: list[Instr] | None = None
        self._scopes: list[dict] = [{}]
        self._consts: dict[str, Any] = {}  # const values by name, for folding
        self._count = 0

    # ------------------------------------------------------------------ structure

    @contextlib.contextmanager
    def loop(self):
        """A block over the r-dims; reductions emitted inside finish when it ends."""
        if self._loop is not None:
            raise RuntimeError("loops do not nest")
        self._loop = []
        self._scopes.append(dict(self._scopes[-1]))
        try:
            yield
        finally:
            self.body.append(Loop(tuple(self._loop)))
            self._loop = None
            self._scopes.pop()

    def _append(self, instr: Instr) -> None:
        (self._loop if self._loop is not None else self.body).append(instr)

    def finish(self, name: str, origins: Sequence[str] = ()) -> Kernel:
        return canonicalize(Kernel(name, self.dims, tuple(self.body), tuple(origins)))

    # ------------------------------------------------------------------ emission

    def fresh(self) -> str:
        self._count += 1
        return f"{self.prefix}{self._count - 1}"

    def emit(self, op: Op, *srcs: Val, dtype: str | None = None, buffer: str | None = None,
             index: tuple = (), value: Any = None, nouts: int = 1):
        """Append an instruction (or reuse an identical one in scope); returns its Val(s)."""
        if op not in (Op.LOAD, Op.STORE) and len(srcs) != ARITY[op]:
            raise ValueError(f"{op.value} takes {ARITY[op]} operands, got {len(srcs)}")
        if dtype is None:
            dtype = "bool" if op in COMPARISONS | PREDICATES else srcs[-1].dtype if op is Op.WHERE else srcs[0].dtype
        if op in POINTWISE and srcs and all(s.name in self._consts for s in srcs):
            return self.const(_fold(op, dtype, [(self._consts[s.name], s.dtype) for s in srcs]), dtype)
        index = tuple(simplify(as_sympy(e), self.ranges) for e in index)
        key = (op, dtype, tuple(s.name for s in srcs), buffer, index, _key(value), nouts)
        scope = self._scopes[-1]
        if op is not Op.STORE and key in scope:
            return scope[key]
        outs = tuple(self.fresh() for _ in range(nouts if op is not Op.STORE else 0))
        self._append(Instr(op, outs, dtype, tuple(s.name for s in srcs), buffer, index, value))
        if op is Op.STORE:
            for sc in self._scopes:
                for k in [k for k in sc if k[0] is Op.LOAD and k[3] == buffer]:
                    del sc[k]
            return None
        if op is Op.CONST:
            self._consts[outs[0]] = value
        vals = tuple(Val(self, o, dtype) for o in outs)
        result = vals[0] if nouts == 1 else vals
        scope[key] = result
        if op in REDUCTIONS and len(self._scopes) > 1:
            self._scopes[0][key] = result
        return result

    def lift(self, x: Any, dtype: str) -> Val:
        """A Val as is; a Python scalar as a const of `dtype`; a sympy expression as an index value cast, or as a
        float64 computation (`real`) when it need not be an integer."""
        if isinstance(x, Val):
            return x
        if isinstance(x, sympy.Basic) and not x.is_number:
            return self.cast(self.index(x) if x.is_integer else self.real(x), dtype)
        if isinstance(x, sympy.Basic):
            x = int(x) if x.is_integer else float(x)
        return self.const(x, dtype)

    def real(self, e: sympy.Expr) -> Val:
        """A symbolic float (`d ** -0.5`, `n / 2` of symbolic sizes) in float64, computed from the sizes as Python
        computes the same float: an index for integer parts, then float operations. `Unsupported` for a form
        without a rule here."""
        if e.is_number:
            return self.const(float(e), "float64")
        if e.is_integer:
            return self.cast(self.index(e), "float64")
        if isinstance(e, sympy.Add):
            terms = [self.real(t) for t in e.args]
            out = terms[0]
            for t in terms[1:]:
                out = out + t
            return out
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff.is_Rational and not coeff.is_Integer:  # (p * rest) / q: Python's n / q for p == 1
                return (self.real(coeff.p * rest) if coeff.p != 1 else self.real(rest)) / float(coeff.q)
            factors = [self.real(f) for f in e.args]
            out = factors[0]
            for f in factors[1:]:
                out = out * f
            return out
        if isinstance(e, sympy.Pow) and e.exp.is_Rational and e.exp != 0:
            base, p = self.real(e.base), e.exp
            if p.is_Integer:
                out = base
                for _ in range(abs(int(p)) - 1):
                    out = out * base
                return out if p > 0 else 1.0 / out
            root, q = base, int(p.q)
            while q % 2 == 0:  # x ** (1/2**k): k square roots (SDPA's sqrt of its scale is d ** -1/4)
                root, q = self.sqrt(root), q // 2
            if q == 1 and abs(p.p) == 1:
                return root if p > 0 else 1.0 / root
            return base ** self.const(float(p), "float64")
        raise Unsupported(f"no float form for the symbolic value {e}")

    def const(self, value: Any, dtype: str) -> Val:
        return self.emit(Op.CONST, dtype=dtype, value=scalar_of(value, dtype))

    def index(self, expr: Any, dtype: str = "int64") -> Val:
        return self.emit(Op.INDEX, dtype=dtype, index=(expr,))

    def load(self, buffer: str, index: Sequence, dtype: str, mask: Val | None = None, other: Any = 0) -> Val:
        if mask is None:
            return self.emit(Op.LOAD, dtype=dtype, buffer=buffer, index=tuple(index))
        return self.emit(Op.LOAD, mask, dtype=dtype, buffer=buffer, index=tuple(index), value=scalar_of(other, dtype))

    def store(self, buffer: str, index: Sequence, value: Val, mask: Val | None = None) -> None:
        srcs = (value,) if mask is None else (value, mask)
        self.emit(Op.STORE, *srcs, dtype="", buffer=buffer, index=tuple(index))

    def cast(self, v: Val, dtype: str, implicit: bool = False) -> Val:
        """`v` as `dtype`; `implicit`: a result narrowed to the dtype its buffer stores (`IMPLICIT_CAST`)."""
        if v.dtype == dtype:
            return v
        return self.emit(Op.CAST, v, dtype=dtype, value=IMPLICIT_CAST if implicit else None)

    def where(self, cond: Val, a: Any, b: Any) -> Val:
        dtype = a.dtype if isinstance(a, Val) else b.dtype
        return self.emit(Op.WHERE, cond, self.lift(a, dtype), self.lift(b, dtype))

    def __getattr__(self, name: str):
        """`b.exp(x)`, `b.and_(x, y)`, `b.softsign(x)`: an emitter for each pointwise op of the table, those that
        `define_op` adds included (operands that are Python scalars become consts of the first Val's dtype)."""
        op = Op.named(name.rstrip("_"))
        if op is None or op not in SEMANTICS or op is Op.WHERE:
            raise AttributeError(f"KernelBuilder has no attribute {name!r} (and {name.rstrip('_')!r} is no "
                                 f"pointwise op of the loop IR)")

        def emit_op(*args: Any) -> Val:
            dtype = next((a.dtype for a in args if isinstance(a, Val)), None)
            if dtype is None:
                raise TypeError(f"b.{name}() needs at least one Val operand")
            return self.emit(op, *(self.lift(a, dtype) for a in args))
        return emit_op

    def reduce(self, op: Op, *srcs: Val):
        """A reduction's result, or its results (Welford's mean and m2), of the dtypes its table entry says."""
        if self._loop is None:
            raise RuntimeError("reductions are emitted inside a loop")
        dtypes = REDUCTION_SEMANTICS[op].result_dtypes(srcs[0].dtype)
        return self.emit(op, *srcs, dtype=dtypes[0], nouts=len(dtypes))


def _fold(op: Op, dtype: str, srcs: list[tuple[Any, str]]) -> Any:
    """The value of a pointwise op on constants, computed by its reference, as the interpreter computes it."""
    args = [torch.tensor(v, dtype=to_dtype(d)) for v, d in srcs]
    result = args[0].to(to_dtype(dtype)) if op is Op.CAST else SEMANTICS[op].reference(*args)
    return result.to(to_dtype(dtype)).item()


def _key(value: Any) -> Any:
    return (type(value).__name__, repr(value))
