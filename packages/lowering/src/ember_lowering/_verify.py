"""The loop-IR verifier. `verify_plan` runs after every pass in tests (`lower(..., check=True)`).

An error names the kernel or buffer and the broken rule, and shows the plan text around it with the offending
line marked `>`.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import sympy
from ember_core import EmberError, Ref, arguments_problem, as_sympy, map_args, resolve_op

from ._buffers import sharing_problem
from ._errors import PlanError
from ._indexing import contiguous_strides, numel, row_major
from ._loop_ir import (
    ARITY,
    BUFFER_KINDS,
    DTYPE_SHORT,
    INT_DTYPES,
    KERNEL_DTYPES,
    REDUCTIONS,
    Buffer,
    Extern,
    Instr,
    Item,
    Kernel,
    KernelPlan,
    Loop,
    Op,
)
from ._op_semantics import SEMANTICS, kind_of
from ._parser import parse_plan
from ._printer import format_plan
from ._reduction_semantics import REDUCTION_SEMANTICS

_LOOP_VAR = re.compile(r"[ir]\d+$")
_SSA = re.compile(r"t\d+$")


_KIND_WORDS = {"float": "float", "int": "integer", "bool": "bool"}


class _Fail(Exception):
    def __init__(self, key: tuple, what: str):
        self.key, self.what = key, what


def verify_plan(plan: KernelPlan) -> None:
    """Raise `PlanError` if the plan breaks a rule of the loop IR."""
    try:
        _Checker(plan).run()
    except _Fail as f:
        raise PlanError(f"plan {plan.name!r}: {f.what}\n{format_plan(plan, mark=f.key, window=10)}") from None


def check_round_trip(plan: KernelPlan) -> None:
    """Raise `PlanError` unless `parse_plan(format_plan(plan)) == plan`."""
    text = format_plan(plan)
    back = parse_plan(text)
    if back != plan:
        diff = "\n".join(difflib.unified_diff(text.splitlines(), format_plan(back).splitlines(), lineterm=""))
        raise PlanError(f"plan {plan.name!r} does not round-trip through its text form:\n{diff or text}")


class _Checker:
    def __init__(self, plan: KernelPlan):
        self.plan = plan
        self.buffers: dict[str, Buffer] = {}
        self.symbols = {s.name for s in plan.symbols} | {n for n in plan.inputs}

    def run(self) -> None:
        for b in self.plan.buffers:
            self.buffer(b)
        for name in self.plan.inputs:
            b = self.buffers.get(name)
            if b is not None and b.kind != "input":
                raise _Fail(("buffer", name), f"input {name!r} is a {b.kind} buffer")
        for b in self.buffers.values():
            if b.kind == "input" and b.name not in self.plan.inputs:
                raise _Fail(("buffer", b.name), f"input buffer {b.name!r} is not among the plan's inputs")
        ready = {b.name for b in self.buffers.values() if b.kind in ("input", "constant")}
        parts = self.tiled()
        for k, step in enumerate(self.plan.steps):
            written = self.step(k, step, ready)
            if whole := written & parts.keys():
                raise _Fail(("step", k), f"step writes {sorted(whole)[0]!r} whole: it is assembled from parts")
            ready |= written
            ready |= {base for base, names in parts.items() if base not in ready and names <= ready}
        for o in self.plan.outputs:
            if isinstance(o, str) and o in self.buffers and self.buffers[o].kind == "local":
                raise _Fail(("buffer", o), f"output {o!r} is a local buffer")
            if isinstance(o, str) and self.root(o) not in ready:
                raise _Fail((), f"output {o!r} is never written")
        problem = sharing_problem(self.plan)
        if problem:
            raise _Fail((), problem)

    # ------------------------------------------------------------------ buffers

    def buffer(self, b: Buffer) -> None:
        key = ("buffer", b.name)
        if b.name in self.buffers:
            raise _Fail(key, f"buffer {b.name!r} is declared twice")
        if b.kind not in BUFFER_KINDS:
            raise _Fail(key, f"buffer {b.name!r} has unknown kind {b.kind!r}")
        if b.dtype not in DTYPE_SHORT:
            raise _Fail(key, f"buffer {b.name!r} has unknown dtype {b.dtype!r}")
        if len(b.stride) != len(b.shape):
            raise _Fail(key, f"buffer {b.name!r} has {len(b.shape)} dims but {len(b.stride)} strides")
        for e in (*b.shape, *b.stride, b.offset):
            self.closed(e, key, f"buffer {b.name!r}")
        if b.kind == "local":
            self.local(b, key)
        if b.kind in ("view", "part") or b.base is not None:
            base = self.buffers.get(b.base or "")
            if base is None:
                raise _Fail(key, f"buffer {b.name!r} names base {b.base!r}, not declared before it")
            if base.kind == "local":
                raise _Fail(key, f"buffer {b.name!r}: its base {b.base!r} is a local buffer")
            if base.kind == "view" or (b.kind != "view" and base.base is not None):
                what = "must not be a view" if b.kind == "view" else "must own its storage"
                raise _Fail(key, f"buffer {b.name!r}: its base {b.base!r} {what}")
            if b.kind == "part" and (base.kind not in ("temp", "output") or base.dtype != b.dtype):
                raise _Fail(key, f"buffer {b.name!r}: a part lies in a temp or an output of its dtype")
            if b.kind not in ("view", "part") and (b.kind != "temp" or base.kind != "temp" or base.dtype != b.dtype):
                raise _Fail(key, f"buffer {b.name!r}: only a temp reuses another temp of its dtype")
        self.buffers[b.name] = b

    def tiled(self) -> dict[str, set[str]]:
        """Each assembled buffer → its parts, checked to tile it: the buffer and each part row-major and dense,
        the parts one after another from its first element to its last (a cat along its leading dims)."""
        parts: dict[str, set[str]] = {}
        for b in self.buffers.values():
            if b.kind == "part":
                parts.setdefault(b.base, set()).add(b.name)
        for base, names in parts.items():
            key = ("buffer", base)
            whole = self.buffers[base]
            if not row_major(whole.shape, whole.stride) or whole.offset != 0:
                raise _Fail(key, f"buffer {base!r} is assembled from parts but is not row-major from its start")
            at: dict[sympy.Expr, Buffer] = {}
            for n in names:
                b = self.buffers[n]
                if not row_major(b.shape, b.stride):
                    raise _Fail(("buffer", n), f"part {n!r} of {base!r} is not row-major")
                at[sympy.expand(b.offset)] = b
            end, count = sympy.Integer(0), 0
            while end in at:
                b = at[end]
                end, count = sympy.expand(end + numel(b.shape)), count + 1
            if count != len(names) or sympy.expand(end - numel(whole.shape)) != 0:
                raise _Fail(key, f"the parts of {base!r} do not tile it: {count} of {len(names)} follow one "
                                 f"another from its start, up to element {end} of {numel(whole.shape)}")
        return parts

    @staticmethod
    def local(b: Buffer, key: tuple) -> None:
        if not all(d.is_Integer and d > 0 for d in b.shape):
            raise _Fail(key, f"local buffer {b.name!r} needs a static shape (positive integers)")
        if tuple(b.stride) != contiguous_strides(b.shape) or b.offset != 0 or b.base is not None:
            raise _Fail(key, f"local buffer {b.name!r} must be row-major, at offset 0 and own its storage")

    def closed(self, expr: sympy.Expr, key: tuple, what: str, extra: frozenset = frozenset()) -> None:
        unknown = {s.name for s in as_sympy(expr).free_symbols} - self.symbols - extra
        if unknown:
            raise _Fail(key, f"{what} uses unknown symbol(s) {', '.join(sorted(unknown))}")

    def root(self, name: str) -> str:
        b = self.buffers.get(name)
        return b.base if b is not None and b.kind == "view" else name

    # ------------------------------------------------------------------ steps

    def step(self, k: int, step, ready: set[str]) -> set[str]:
        writes = self.extern(k, step, ready) if isinstance(step, Extern) else _KernelChecker(self, k, step, ready).run()
        kinds = ("temp", "output") if isinstance(step, Extern) else ("temp", "output", "local", "part")
        for name in writes:
            b = self.buffers.get(name)
            if b is None:
                raise _Fail(("step", k), f"step writes undeclared buffer {name!r}")
            if b.kind not in kinds:
                raise _Fail(("step", k), f"step writes {b.kind} buffer {name!r}")
            if name in ready:
                raise _Fail(("step", k), f"buffer {name!r} is written by two steps")
        return writes

    def extern(self, k: int, ext: Extern, ready: set[str]) -> set[str]:
        self.extern_call(k, ext)
        stack = [*ext.args, *ext.kwargs.values()]
        while stack:
            a = stack.pop()
            if isinstance(a, tuple):
                stack.extend(a)
            elif isinstance(a, Ref):
                if a.name not in self.buffers:
                    raise _Fail(("step", k), f"extern {ext.op} reads undeclared buffer {a.name!r}")
                if self.buffers[a.name].kind == "local":
                    raise _Fail(("step", k), f"extern {ext.op} reads local buffer {a.name!r}")
                if self.root(a.name) not in ready:
                    raise _Fail(("step", k), f"extern {ext.op} reads {a.name!r} before it is written")
        return {o for o in ext.outs if o != "_"}

    def extern_call(self, k: int, ext: Extern) -> None:
        """The op exists, and the arguments bind to its schema with the types it declares (a Ref is a tensor)."""
        try:
            op = resolve_op(ext.op)
        except EmberError as e:
            raise _Fail(("step", k), f"extern {ext.op}: {e}") from None

        def kind(name: str) -> tuple[str, str] | None:
            b = self.buffers.get(name)
            return ("tensor", b.dtype) if b is not None else None
        problem = arguments_problem(op, ext.op, _numbers(ext.args, self.buffers),
                                    {k: _numbers(v, self.buffers) for k, v in ext.kwargs.items()}, kind)
        if problem is not None:
            raise _Fail(("step", k), f"extern {problem}")


def _numbers(arg: Any, buffers: dict[str, Buffer]) -> Any:
    """An extern argument with each `Item` as a number of its buffer's kind (what the call is given), for the
    schema's type check; an Item of an undeclared or non-scalar buffer stays, and fails that check."""
    def number(a: Any) -> Any:
        b = buffers.get(a.name) if isinstance(a, Item) else None
        if b is None or b.shape:
            return a
        return False if b.dtype == "bool" else 0 if b.dtype in INT_DTYPES else 0.0
    return map_args(arg, number)


class _KernelChecker:
    """Scopes, operands, dtypes and indices of one kernel."""

    def __init__(self, plan: _Checker, k: int, kernel: Kernel, ready: set[str]):
        self.p, self.k, self.kernel, self.ready = plan, k, kernel, ready
        self.dtypes: dict[str, str] = {}
        self.writes: set[str] = set()

    def run(self) -> set[str]:
        seen = set()
        for d in self.kernel.dims:
            if not _LOOP_VAR.match(d.var) or d.var in seen:
                raise _Fail(("step", self.k), f"kernel {self.kernel.name}: bad or repeated dim var {d.var!r}")
            seen.add(d.var)
            self.p.closed(d.size, ("step", self.k), f"kernel {self.kernel.name}")
        outer = {d.var for d in self.kernel.outer_dims}
        every = outer | {d.var for d in self.kernel.reduce_dims}
        visible: set[str] = set()
        for j, stmt in enumerate(self.kernel.body):
            if isinstance(stmt, Loop):
                if not self.kernel.reduce_dims:
                    raise self.fail(("stmt", self.k, j), "a loop in a kernel without r-dims")
                inner = set(visible)
                for n, i in enumerate(stmt.body):
                    self.instr(i, ("stmt", self.k, j, n), inner, every, in_loop=True)
                    inner |= set(i.outs)
                    if i.op in REDUCTIONS:
                        visible |= set(i.outs)
            else:
                self.instr(stmt, ("stmt", self.k, j), visible, outer, in_loop=False)
                visible |= set(stmt.outs)
        return self.writes

    def fail(self, key: tuple, what: str) -> _Fail:
        return _Fail(key, f"kernel {self.kernel.name}: {what}")

    def instr(self, i: Instr, key: tuple, visible: set[str], loop_vars: set[str], in_loop: bool) -> None:
        for o in i.outs:
            if o in self.dtypes or not _SSA.match(o):
                raise self.fail(key, f"value {o!r} is defined twice or badly named")
        for s in i.srcs:
            if s not in visible:
                raise self.fail(key, f"operand {s!r} is not defined or not visible here")
        if i.op in REDUCTIONS and not in_loop:
            raise self.fail(key, f"{i.op.value} outside a loop")
        if i.op is not Op.LOAD and i.op is not Op.STORE and len(i.srcs) != ARITY[i.op]:
            raise self.fail(key, f"{i.op.value} takes {ARITY[i.op]} operands, got {len(i.srcs)}")
        ints = frozenset(v for v in visible if self.dtypes.get(v) in INT_DTYPES)
        for e in i.index:
            self.p.closed(e, key, f"kernel {self.kernel.name}: index {e}", frozenset(loop_vars) | ints)
        if i.in_bounds and (i.op is not Op.LOAD or not any(s.name in ints for e in i.index for s in e.free_symbols)):
            raise self.fail(key, "'in bounds' marks only a load whose index reads values (a gather)")
        if i.op in (Op.LOAD, Op.STORE):
            self.access(i, key)
        elif i.dtype not in KERNEL_DTYPES:
            raise self.fail(key, f"dtype {i.dtype!r} is not a kernel dtype")
        else:
            self.types(i, key)
        for o in i.outs:
            self.dtypes[o] = i.dtype

    def access(self, i: Instr, key: tuple) -> None:
        b = self.p.buffers.get(i.buffer or "")
        if b is None:
            raise self.fail(key, f"{i.op.value} of undeclared buffer {i.buffer!r}")
        if len(i.index) != b.rank:
            raise self.fail(key, f"{i.buffer} has {b.rank} dims, indexed with {len(i.index)}")
        if b.dtype not in KERNEL_DTYPES:
            raise self.fail(key, f"buffer {b.name} of dtype {b.dtype} is not for kernels")
        if b.kind == "local":
            self.local_access(i, b, key)
        if i.op is Op.LOAD:
            if i.dtype != b.dtype:
                raise self.fail(key, f"load of {b.name} ({b.dtype}) gives {i.dtype}")
            if self.p.root(b.name) not in self.ready and b.name not in self.writes:
                raise self.fail(key, f"load of {b.name!r} before any step writes it")
            if i.srcs and self.dtypes[i.srcs[0]] != "bool":
                raise self.fail(key, "a load's mask must be bool")
            return
        if b.kind not in ("temp", "output", "local", "part"):
            raise self.fail(key, f"store to {b.kind} buffer {b.name}")
        if self.dtypes[i.srcs[0]] != b.dtype:
            raise self.fail(key, f"store of a {self.dtypes[i.srcs[0]]} value to {b.name} ({b.dtype})")
        self.writes.add(b.name)

    def local_access(self, i: Instr, b: Buffer, key: tuple) -> None:
        rvars = {d.var for d in self.kernel.reduce_dims}
        if not rvars:
            raise self.fail(key, f"local {b.name} in a kernel without r-dims (a local holds one row of them)")
        other = sorted({s.name for e in i.index for s in as_sympy(e).free_symbols} - rvars)
        if other:
            raise self.fail(key, f"local {b.name} is indexed by {', '.join(other)}; only r-dims may index a local")
        if i.op is Op.LOAD and b.name not in self.writes:
            raise self.fail(key, f"load of local {b.name!r} before this kernel stores it")

    def types(self, i: Instr, key: tuple) -> None:
        src = [self.dtypes[s] for s in i.srcs]
        op = i.op
        if i.dtype in ("float16", "bfloat16") and op not in (Op.CONST, Op.CAST, Op.WHERE):
            raise self.fail(key, f"{op.value} computes in {i.dtype}; kernels compute in float32 (cast first)")
        if op in (Op.CONST, Op.CAST, Op.LOAD, Op.STORE):
            return
        if op is Op.INDEX:
            if i.dtype not in INT_DTYPES:
                raise self.fail(key, "index gives an integer")
            return
        if op is Op.WHERE:
            if src[0] != "bool":
                raise self.fail(key, "where's condition must be bool")
            src = src[1:]
        want = self._reduced(op, src, key) if op in REDUCTIONS else SEMANTICS[op].result_dtype(src[0])
        if i.dtype != want:
            raise self.fail(key, f"{op.value} gives {want}, declared {i.dtype}")
        indexed = op in REDUCTIONS and "index" in REDUCTION_SEMANTICS[op].state  # argmax: (values, their indices)
        if not indexed and len(set(src)) > 1:
            raise self.fail(key, f"{op.value} operands differ in dtype: {', '.join(src)}")
        if op not in REDUCTIONS:
            self._check_kind(op, SEMANTICS[op].kinds, src[0], key)

    def _check_kind(self, op: Op, kinds: frozenset[str], dtype: str, key: tuple) -> None:
        if kind_of(dtype) not in kinds:
            named = " or ".join(_KIND_WORDS[k] for k in ("float", "int", "bool") if k in kinds)
            raise self.fail(key, f"{op.value} needs {named} operands, got {dtype}")

    def _reduced(self, op: Op, src: list[str], key: tuple) -> str:
        """The dtype a reduction gives (`REDUCTION_SEMANTICS`)."""
        meaning = REDUCTION_SEMANTICS[op]
        if "index" in meaning.state and src[1] not in INT_DTYPES:
            raise self.fail(key, f"{op.value} takes an integer index operand")
        self._check_kind(op, meaning.kinds, src[0], key)
        return meaning.result_dtypes(src[0])[0]
