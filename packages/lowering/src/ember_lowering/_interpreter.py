"""The reference interpreter of the loop IR: slow-ish, vectorized with torch, obviously correct.

A kernel runs as whole tensors over its iteration space: dim k of every value is the kernel's dim k, outer
values have size 1 in the r-dims, and a reduction reduces the r-dims of a loop value. Buffers that the plan
allocates are filled with NaN (or a sentinel) first, so reading memory nobody wrote shows up in tests;
a `temp` that reuses another buffer's storage really shares it, so a wrong reuse plan corrupts results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy
import torch
from ember_core import Ref, Sym, as_sympy, dtype_name, resolve_op, to_dtype

from ._errors import PlanError
from ._indexing import parse_expr, storage_size, to_expr
from ._loop_ir import FLOAT_DTYPES, Buffer, Extern, Instr, Item, Kernel, KernelPlan, Loop, Op
from ._op_semantics import SEMANTICS
from ._printer import format_instr
from ._reduction_semantics import REDUCTION_SEMANTICS

_SENTINEL_INT = -7  # what unwritten integer memory holds

# ---------------------------------------------------------------------------------------------- index exprs


def evaluate(expr: sympy.Expr, env: Mapping[str, Any], real: bool = False) -> Any:
    """An index expression's value: a Python int, or an int64 tensor where the env holds tensors. `real`: inside a
    rounding of a float (`CeilToInt(IntTrueDiv(s0, 2))`, `math.ceil(n / 2)`), where a true division is one."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Float:  # a double of a size (a fractional scale: `TruncToInt(1.7*ToFloat(s0))`)
        return float(expr)
    if expr.is_Symbol:
        return env[expr.name]
    if expr.is_Rational:
        raise PlanError(f"index expression {expr} is not an integer")
    name = type(expr).__name__
    real = real or name in ("ToFloat", *_ROUNDED)
    args = [evaluate(a, env, real) for a in expr.args] if not isinstance(expr, (sympy.floor, sympy.ceiling)) else None
    if isinstance(expr, sympy.Add):
        return _fold(args, lambda a, b: a + b)
    if isinstance(expr, sympy.Mul):
        return _mul(expr, env, real)
    if isinstance(expr, sympy.Pow) and expr.args[1].is_Integer and expr.args[1] >= 0:
        return _fold([args[0]] * int(expr.args[1]) or [1], lambda a, b: a * b)
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        n, d = evaluate(num, env), evaluate(den, env)
        return _floordiv(n, d) if isinstance(expr, sympy.floor) else -_floordiv(-n, d)
    if isinstance(expr, sympy.Mod):
        return _mod(*args)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        big = isinstance(expr, sympy.Max)
        return _fold(args, lambda a, b: _maximum(a, b) if big else _minimum(a, b))
    if name in ("IntTrueDiv", "FloatTrueDiv") and real:
        a, b = (x.double() if isinstance(x, torch.Tensor) else float(x) for x in args)
        return a / b
    if name == "FloorDiv":
        return _floordiv(*args)
    if name == "ModularIndexing":
        return _mod(_floordiv(args[0], args[1]), args[2])
    if name in ("CleanDiv", "IntTrueDiv"):
        return _floordiv(*args)
    if name == "ToFloat":
        return args[0].double() if isinstance(args[0], torch.Tensor) else float(args[0])
    if name in _ROUNDED:
        tensor_op, number_op = _ROUNDED[name]
        return getattr(args[0], tensor_op)().long() if isinstance(args[0], torch.Tensor) else number_op(args[0])
    raise PlanError(f"cannot evaluate index expression {expr} ({name})")


_ROUNDED = {"TruncToInt": ("trunc", math.trunc), "FloorToInt": ("floor", math.floor),
            "CeilToInt": ("ceil", math.ceil)}  # a size of a float (schema 1.2): (tensor method, number function)


def _mul(expr: sympy.Mul, env: Mapping[str, Any], real: bool = False) -> Any:
    num, den = sympy.fraction(expr)
    if den != 1:
        raise PlanError(f"index expression {expr} is not an integer")
    return _fold([evaluate(a, env, real) for a in expr.args], lambda a, b: a * b)


def _fold(xs: list, fn: Callable) -> Any:
    acc = xs[0]
    for x in xs[1:]:
        acc = fn(acc, x)
    return acc


def _floordiv(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.div(torch.as_tensor(a), b, rounding_mode="floor")
    return a // b


def _mod(a: Any, b: Any) -> Any:
    return torch.remainder(torch.as_tensor(a), b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) \
        else a % b


def _maximum(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))
    return max(a, b)


def _minimum(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))
    return min(a, b)


def size_of(expr: Any, syms: Mapping[str, int]) -> int:
    return int(evaluate(to_expr(expr), syms))


# ---------------------------------------------------------------------------------------------- op rules


class _References(Mapping):
    """op → the torch function that is its meaning (`_op_semantics.SEMANTICS`), as the interpreter runs it."""

    def __getitem__(self, op: Op) -> Callable[..., torch.Tensor]:
        return SEMANTICS[op].reference

    def __iter__(self):
        return iter(SEMANTICS)

    def __len__(self) -> int:
        return len(SEMANTICS)


interpreter_rules: Mapping[Op, Callable[..., torch.Tensor]] = _References()


def _reduce_last(op: Op, x: torch.Tensor, idx: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """Reduce the last dim of x (the flattened r-dims), keeping it as size 1: the reduction's reference, or what
    reducing nothing gives (`_reduction_semantics.REDUCTION_SEMANTICS`)."""
    meaning = REDUCTION_SEMANTICS[op]
    if x.shape[-1] > 0:
        return meaning.reference(x, idx)
    dtype, shape = dtype_name(x.dtype), (*x.shape[:-1], 1)
    return tuple(torch.full(shape, value, dtype=to_dtype(d), device=x.device)
                 for value, d in zip(meaning.empty(dtype), meaning.result_dtypes(dtype)))


# ---------------------------------------------------------------------------------------------- kernels


def _no_negative(idx: list, i: Instr) -> None:
    """torch's indexing wraps a negative index where the codegens raise their error flag (an index read from a
    tensor, a gather's, can be anything): the interpreter raises too. Called for indirect loads only, the ones the
    codegens check (an index over loop variables alone is in bounds by construction)."""
    for t in idx:
        if isinstance(t, torch.Tensor) and t.numel() and bool((t < 0).any()):
            raise IndexError(f"a negative index of buffer {i.buffer!r}: {int(t.min())}")


class _KernelRun:
    """One kernel executed as tensors over its iteration space. A local buffer is a fresh tensor of the outer
    dims' sizes followed by its own shape: one row per outer iteration, addressed with the outer vars first."""

    def __init__(self, kernel: Kernel, buffers: dict[str, torch.Tensor], syms: dict[str, int],
                 device: torch.device | str = "cpu", locals_: Mapping[str, Buffer] | None = None):
        self.kernel, self.buffers, self.syms, self.device = kernel, buffers, syms, torch.device(device)
        values = {o for i in kernel.instrs() for o in i.outs}
        self.indirect = {id(i) for i in kernel.instrs() if i.op is Op.LOAD and any(
            s.name in values for e in i.index for s in as_sympy(e).free_symbols)}  # an index read from a value
        used = {i.buffer for i in kernel.instrs()}
        self.locals = {n: b for n, b in (locals_ or {}).items() if n in used}
        self.sizes = [size_of(d.size, syms) for d in kernel.dims]
        self.rdims = [k for k, d in enumerate(kernel.dims) if d.reduce]
        n = len(self.sizes)
        self.env: dict[str, Any] = dict(syms)
        for k, (d, size) in enumerate(zip(kernel.dims, self.sizes)):
            self.env[d.var] = torch.arange(size, device=self.device).view([-1 if j == k else 1 for j in range(n)])
        self.full = torch.Size(self.sizes)
        outer = [k for k, d in enumerate(kernel.dims) if not d.reduce]
        self.rows = [self.env[kernel.dims[k].var] for k in outer]
        self.local_data = {n: _filled(b.dtype, [self.sizes[k] for k in outer] + [int(d) for d in b.shape],
                                      self.device) for n, b in self.locals.items()}

    def run(self) -> None:
        for stmt in self.kernel.body:
            for instr in (stmt.body if isinstance(stmt, Loop) else (stmt,)):
                try:
                    self.step(instr)
                except PlanError:
                    raise
                except Exception as e:
                    e.add_note(f"While running kernel {self.kernel.name!r}: {format_instr(instr)}")
                    raise

    def value(self, name: str) -> torch.Tensor:
        return self.env[name]

    def index(self, instr: Instr) -> list[torch.Tensor]:
        return [torch.as_tensor(evaluate(e, self.env), dtype=torch.int64, device=self.device) for e in instr.index]

    def address(self, instr: Instr) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The tensor a load or store reads or writes, and its index tensors."""
        if instr.buffer in self.local_data:
            return self.local_data[instr.buffer], [*self.rows, *self.index(instr)]
        return self.buffers[instr.buffer], self.index(instr)

    def step(self, i: Instr) -> None:
        op = i.op
        if op is Op.CONST:
            self.env[i.out] = torch.tensor(i.value, dtype=to_dtype(i.dtype), device=self.device)
        elif op is Op.INDEX:
            value = evaluate(i.index[0], self.env)
            self.env[i.out] = torch.as_tensor(value, device=self.device).to(to_dtype(i.dtype))
        elif op is Op.LOAD:
            self.env[i.out] = self.load(i)
        elif op is Op.STORE:
            self.store(i)
        elif op is Op.CAST:
            self.env[i.out] = self.value(i.srcs[0]).to(to_dtype(i.dtype))
        elif op in REDUCTION_SEMANTICS:
            self.reduce(i)
        else:
            result = interpreter_rules[op](*(self.value(s) for s in i.srcs))
            self.env[i.out] = result.to(to_dtype(i.dtype))

    def load(self, i: Instr) -> torch.Tensor:
        buf, idx = self.address(i)
        if not i.srcs:
            if id(i) in self.indirect:
                _no_negative(idx, i)
            return buf[tuple(idx)] if idx else buf[()]
        mask = self.value(i.srcs[0])
        other = torch.tensor(i.value, dtype=buf.dtype, device=buf.device)
        if buf.numel() == 0:
            return torch.broadcast_to(other, torch.broadcast_shapes(mask.shape, *(t.shape for t in idx)))
        safe = [torch.where(mask, t, 0) for t in idx]
        if id(i) in self.indirect:
            _no_negative(safe, i)
        return torch.where(mask, buf[tuple(safe)] if safe else buf[()], other)

    def store(self, i: Instr) -> None:
        buf, idx = self.address(i)
        value = self.value(i.srcs[0])
        shapes = [value.shape, *(t.shape for t in idx)]
        if len(i.srcs) > 1:
            shapes.append(self.value(i.srcs[1]).shape)
        shape = torch.broadcast_shapes(*shapes)
        idx = [t.expand(shape) for t in idx]
        value = value.expand(shape)
        if len(i.srcs) > 1:
            mask = self.value(i.srcs[1]).expand(shape)
            idx, value = [t[mask] for t in idx], value[mask]
        if not idx:
            buf.copy_(value.reshape(()))
        else:
            buf.index_put_(tuple(idx), value)

    def reduce(self, i: Instr) -> None:
        srcs = [self.value(s).expand(self.full) for s in i.srcs]
        keep = [k for k in range(len(self.sizes)) if k not in self.rdims]
        outer = [self.sizes[k] if k in keep else 1 for k in range(len(self.sizes))]
        n = math.prod(self.sizes[k] for k in self.rdims)
        flat = [s.permute(*keep, *self.rdims).reshape(*(self.sizes[k] for k in keep), n) for s in srcs]
        results = _reduce_last(i.op, flat[0], flat[1] if len(flat) > 1 else None)
        for name, r in zip(i.outs, results):
            self.env[name] = r.to(to_dtype(i.dtype)).reshape(outer)  # kept dims are in order: a reshape


# ---------------------------------------------------------------------------------------------- plans


def _filled(dtype: str, shape: list[int], device: torch.device | str) -> torch.Tensor:
    """Fresh memory as the interpreter hands it out: NaN (or a sentinel), so reading it unwritten shows."""
    fill = math.nan if dtype in FLOAT_DTYPES else (True if dtype == "bool" else _SENTINEL_INT)
    return torch.full(shape, fill, dtype=to_dtype(dtype), device=device)


class PlanInterpreter:
    """Runs a KernelPlan on concrete inputs. `constants` gives the tensors of the graph's constants."""

    def __init__(self, plan: KernelPlan, constants: Mapping[str, torch.Tensor] | None = None):
        self.plan = plan
        self.constants = dict(constants or {})
        self.buffers = plan.buffer_map
        self.extern_outs = {o for s in plan.externs for o in s.outs}
        self.locals = {b.name: b for b in plan.buffers if b.kind == "local"}

    def bindings(self, inputs: Sequence[Any]) -> dict[str, int]:
        """The symbols' values, read off the inputs' shapes and strides and the symbolic-int inputs."""
        env: dict[str, int] = {}
        for name, x in zip(self.plan.inputs, inputs):
            b = self.buffers.get(name)
            if b is None:
                env[name] = int(x)
                continue
            for d, n in (*zip(b.shape, x.shape), *zip(b.stride, x.stride())):
                if d.is_Symbol:
                    env.setdefault(d.name, int(n))
        return env

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        plan = self.plan
        if len(inputs) != len(plan.inputs):
            raise PlanError(f"plan {plan.name!r} takes {len(plan.inputs)} inputs, got {len(inputs)}")
        syms = self.bindings(inputs)
        tensors: dict[str, torch.Tensor] = {n: x for n, x in zip(plan.inputs, inputs) if n in self.buffers}
        tensors.update({n: c for n, c in self.constants.items() if n in self.buffers})
        storage: dict[str, torch.Tensor] = {}
        for b in plan.buffers:
            if b.kind in ("temp", "output", "part") and b.name not in self.extern_outs:
                tensors[b.name] = self.allocate(b, storage, syms)
        for step in plan.steps:
            if isinstance(step, Kernel):
                self.make_views(tensors, syms)
                _KernelRun(step, tensors, syms, plan.device, self.locals).run()
            else:
                self.make_views(tensors, syms)
                self.call(step, tensors, syms)
        self.make_views(tensors, syms)
        return [tensors[o] if isinstance(o, str) else size_of(parse_expr(o.expr), syms) for o in plan.outputs]

    __call__ = run

    def allocate(self, b: Buffer, storage: dict[str, torch.Tensor], syms: dict[str, int]) -> torch.Tensor:
        shape = [size_of(d, syms) for d in b.shape]
        stride = [size_of(s, syms) for s in b.stride]
        n = size_of(storage_size(b.shape, b.stride, b.offset), syms)
        owner = b.base or b.name
        if owner not in storage:  # an ATen result's storage (`plan-buffers`) is its own here, sized for all its users
            whole = size_of(storage_size(self.buffers[owner].shape, self.buffers[owner].stride), syms)
            storage[owner] = _filled(b.dtype, [max(n, whole, 1)], self.plan.device)
        st = storage[owner]
        if st.numel() < n:
            raise PlanError(f"buffer {b.name!r} needs {n} elements but reuses {owner!r} of {st.numel()}")
        return st.as_strided(shape, stride, size_of(b.offset, syms))

    def make_views(self, tensors: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        for b in self.plan.buffers:
            if b.kind == "view" and b.name not in tensors and b.base in tensors:
                root = tensors[b.base]
                tensors[b.name] = root.as_strided([size_of(d, syms) for d in b.shape],
                                                  [size_of(s, syms) for s in b.stride],
                                                  root.storage_offset() + size_of(b.offset, syms))

    def call(self, ext: Extern, tensors: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        def read(a: Any) -> Any:
            if isinstance(a, Item):
                return tensors[a.name].item()
            if isinstance(a, Ref):
                return tensors[a.name]
            if isinstance(a, Sym):
                return size_of(parse_expr(a.expr), syms)
            if isinstance(a, tuple):
                return [read(x) for x in a]
            return a

        result = resolve_op(ext.op)(*(read(a) for a in ext.args), **{k: read(v) for k, v in ext.kwargs.items()})
        results = result if isinstance(result, (tuple, list)) and len(ext.outs) > 1 else (result,)
        for name, r in zip(ext.outs, results):
            if name != "_":
                tensors[name] = r


def run_plan(plan: KernelPlan, inputs: Sequence[Any], constants: Mapping[str, torch.Tensor] | None = None) -> list:
    """Run a plan once on concrete inputs; returns its outputs in order."""
    return PlanInterpreter(plan, constants).run(inputs)
