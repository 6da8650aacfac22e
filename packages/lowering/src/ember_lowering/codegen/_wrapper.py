"""The generated Python wrapper: straight-line code that binds sizes, checks layouts, allocates, calls the kernels
and ATen. Every codegen built on this layer writes its wrapper with `WrapperWriter`; a codegen says only how a
segment of its kernels is called (`call_segment`). codegen-cpp's wrapper, for a softmax over dynamic rows:

    def graph_softmax(inputs):
        b_x_1, = inputs
        try:
            S_s0 = b_x_1.shape[0]
            if b_x_1.shape != (S_s0, 7) or b_x_1.stride() != (7, 1):
                return _relayout(inputs)
            b_out = _empty_cpu((S_s0, 7), (7, 1), _dt0)
            if ember_seg0(b_x_1.data_ptr(), b_out.data_ptr(), S_s0):
                return _on_error(inputs)
            return [b_out]
        except _UseFallback:
            return _fallback(inputs)

Everything that does not depend on the call (ops, dtypes, constants' pointers, static sizes) is computed once and
bound as a global; the `try` costs nothing unless the fallback runs. A call of many small steps (an RNN's time steps:
hundreds of buffers a call) spends microseconds per buffer here, so a buffer in its root's very layout is the root's
tensor itself (`b_add = b_mm`), and on the CPU new buffers and views of storage the call itself made come from
torch's C++ entry points (`_empty_cpu`, `_reinterpret`; `FAST_CPU_TENSORS`) rather than through the dispatcher;
inputs are viewed, and outputs made, with `torch.as_strided`, so the caller gets views in autograd's sense.
`_relayout`, `_on_error` and `_fallback` are bound by `PlanCodegen` (see `_fallback.py`).

A backward's wrapper (`Program.consumes`) takes `_take`, True when autograd calls it through
`CompiledGraph.consume`: once the inputs (saved values nothing else needs now) are checked and the kernels'
build is known to have bound (`_ready`: a failed build still falls back on whole inputs), it empties the list,
and deletes each input's local after its last use (`_lifetimes.py`), as eager's backward frees saved tensors:

    def graph_bw(inputs, _take=False):
        ...
        b_x, b_g = inputs
        try:
            if b_x.shape != (8, 7) or ...:
                return _relayout(inputs)
            if _take:
                _ready()
                inputs.clear()
            ...
            del b_x

Each wrapper has a profiled twin, `graph_softmax_profiled`, which the wrapper's first line calls instead while a
profiler records (`ember_core.profiler_active()`, torch's flag, read in tens of nanoseconds: the only cost of
profiling to a call that is not profiled; `benchmarks/profiling_check.py` measures it). The twin is the same
program with ranges: one around the call, named by the graph's label (`_graph_range`, `ember:softmax`), and one
around each kernel and extern call, named after it:

    def graph_softmax_profiled(inputs):
        with _range(_graph_range):
            b_x_1, = inputs
            try:
                ...
                with _range('k0_softmax_reduce_s0x7'):
                    if ember_run_k0_softmax_reduce_s0x7(b_x_1.data_ptr(), b_out.data_ptr(), S_s0):
                        return _on_error(inputs)
                return [b_out]
            except _UseFallback:
                return _fallback(inputs)

A codegen says how a segment's kernels are called one by one (`call_segment_profiled`); by default the segment
is one range. codegen-cpp calls each kernel through an entry point of its own in the same library.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import sympy
import torch
from ember_core import (
    Ref,
    Sym,
    direct_call,
    keyword_name,
    profile_range,
    profiler_active,
    resolve_op,
    returns_sequence,
    to_dtype,
)

from ember_lowering import Buffer, Extern, Item, to_expr

from ._exprs import IndexPrinter
from ._fallback import UseFallback, fix_layout, wrong_dtype
from ._lazy import nothing_to_wait_for
from ._lifetimes import kept_to_the_end, last_uses
from ._program import InterpretedKernel, Program, Segment, interpreted_kernel


def _fast_cpu_tensors() -> tuple[Callable, Callable] | None:
    """torch's C++ entry points for a new CPU tensor and for a tensor on another's storage, where this torch has them
    (Dynamo's module; each about half the cost of `torch.empty_strided` and `torch.as_strided`, which go through the
    dispatcher: 0.5 against 1.1 us on a Xeon): `(empty(size, stride, dtype), reinterpret(t, size, stride, +offset))`.
    The reinterpreted tensor is no view in autograd's sense and has a version counter of its own, so the wrapper
    gives it only to its own kernels and ATen calls, never to the caller."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    empty, reinterpret = (getattr(guards, n, None) for n in ("_empty_strided_cpu", "_reinterpret_tensor"))
    return (empty, reinterpret) if callable(empty) and callable(reinterpret) else None


FAST_CPU_TENSORS = _fast_cpu_tensors()


class WrapperWriter:
    """Writes the wrapper of one program; `source()` gives its text and the globals it needs. Subclasses say how a
    segment is called (`call_segment`); everything else (bindings, checks, allocation, externs, interpreted
    kernels, frees, outputs) is the same for every codegen."""

    # a CPU plan allocates and reinterprets through torch's C++ entry points (`FAST_CPU_TENSORS`); a codegen whose
    # CPU plans stand in for another device's (Triton's interpreter) says False, so it prints what that device runs
    cpu_fast_paths = True

    def __init__(self, program: Program, fn_name: str, constants: dict[str, torch.Tensor]):
        self.p, self.layout, self.plan = program, program.layout, program.plan
        self.constants = constants
        self.fn_name = fn_name
        self.globals: dict[str, Any] = {"_empty_strided": torch.empty_strided, "_as_strided": torch.as_strided,
                                        "_UseFallback": UseFallback, "_fix_layout": fix_layout,
                                        "_wrong_dtype": wrong_dtype, "_profiling": profiler_active,
                                        "_range": profile_range, "_graph_range": f"ember:{fn_name}",
                                        "_ready": nothing_to_wait_for,
                                        "_device": torch.device(self.plan.device)}
        names = dict(self.layout.sym_local)
        self.py = IndexPrinter(names)
        self.have: set[str] = set()
        self.allocated: set[str] = set()
        self.lines: list[str] = []
        self.profiled = False  # writing the profiled twin
        self.indent = 0  # levels added to every emitted line (inside a range)
        self._consts: dict[int, str] = {}
        self._stem_counts: dict[str, int] = {}
        self._interpreters: dict[int, Callable] = {}
        self.kernel_roots = {r for s in program.segments for r in s.roots}
        self.viewed_roots = {self.layout.root(b.name) for b in self.plan.buffers if b.kind == "view"}
        # what the caller receives is made the documented way (a view of its storage, a tensor of torch's own)
        self.returned = {n for o in self.plan.outputs if isinstance(o, str) for n in (o, self.layout.root(o))}
        self.fast_cpu = self.cpu_fast_paths and self.plan.device == "cpu" and FAST_CPU_TENSORS is not None
        if self.fast_cpu:
            self.globals["_empty_cpu"], self.globals["_reinterpret"] = FAST_CPU_TENSORS

    # ------------------------------------------------------------------ helpers

    def const(self, obj: Any, stem: str = "_k") -> str:
        """The global name `obj` is bound to in the wrapper: `stem` and a count kept per stem, so a helper added to
        the globals renames nothing (snapshots of generated source change only where the code does)."""
        key = id(obj)
        if key not in self._consts:
            number = self._stem_counts.get(stem, 0)
            self._stem_counts[stem] = number + 1
            name = f"{stem}{number}"
            assert name not in self.globals, name
            self.globals[name] = obj
            self._consts[key] = name
        return self._consts[key]

    def tup(self, exprs) -> str:
        items = [self.py(e) for e in exprs]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    def emit(self, line: str, depth: int = 2) -> None:
        self.lines.append("    " * (depth + self.indent) + line)

    @contextlib.contextmanager
    def ranged(self, name: str) -> Iterator[None]:
        """Lines emitted inside go in a profiler range named `name` in the profiled twin (as they are elsewhere)."""
        if not self.profiled:
            yield
            return
        self.emit(f"with _range({name!r}):")
        self.indent += 1
        try:
            yield
        finally:
            self.indent -= 1

    def tensor(self, name: str) -> str:
        """The Python local holding buffer `name`, making a view of its root first when needed."""
        local = self.layout.local[name]
        if name in self.have:
            return local
        b = self.layout.buffers[name]
        root = self.layout.root(name)
        rel = self.py(self.layout.rel_offset(name))
        root_local = self.tensor(root) if root != name else None
        if root_local is None:
            raise AssertionError(f"buffer {name!r} has no value yet")
        owner = self.layout.is_owner(root)
        r = self.layout.buffers[root]
        if name not in self.returned and rel == "0" and (b.shape, b.stride, b.dtype) == (r.shape, r.stride, r.dtype):
            self.emit(f"{local} = {root_local}")  # the root's very layout: the root itself (no view to make)
        elif name not in self.returned and self.fast_cpu and (owner or root in self.layout.extern_outs):
            # a buffer only this call sees, of storage ember allocated or ATen returned: a tensor on that storage
            # without a view's bookkeeping (torch's `_reinterpret_tensor`: its offset counts from the root's)
            self.emit(f"{local} = _reinterpret({root_local}, {self.tup(b.shape)}, {self.tup(b.stride)}, {rel})")
        else:
            offset = rel if owner else (f"{root_local}.storage_offset() + {rel}" if rel != "0"
                                        else f"{root_local}.storage_offset()")
            self.emit(f"{local} = _as_strided({root_local}, {self.tup(b.shape)}, {self.tup(b.stride)}, {offset})")
        self.have.add(name)
        return local

    def dtype(self, name: str) -> str:
        return self.const(to_dtype(name), "_dt")

    # ------------------------------------------------------------------ source

    def source(self) -> tuple[str, dict[str, Any]]:
        """The wrapper, its profiled twin and `_layouts`, and the globals they need."""
        constants = {n: c for n, c in self.constants.items() if n in self.layout.buffers}
        for name, c in constants.items():
            self.globals[f"_c_{self.layout.local[name]}"] = c
        fast = self._function(constants, profiled=False)
        twin = self._function(constants, profiled=True)
        return "\n".join(fast + [""] + twin + [""] + self._layouts_fn()) + "\n", self.globals

    def _function(self, constants: dict[str, torch.Tensor], profiled: bool) -> list[str]:
        """The lines of the wrapper, or of its profiled twin (the same steps, each in a range)."""
        plan = self.plan
        self.have, self.allocated, self.lines = set(), set(), []
        self.profiled, self.indent = profiled, int(profiled)
        pad = "    " * self.indent
        take = ", _take" if self.p.consumes else ""
        params = f"inputs{take}=False" if take else "inputs"
        if profiled:
            head = [f"def {self.fn_name}_profiled({params}):", "    with _range(_graph_range):"]
        else:
            head = [f"def {self.fn_name}({params}):", "    if _profiling():",
                    f"        return {self.fn_name}_profiled(inputs{take})"]
        targets = self._targets()
        if targets:
            head.append(f"{pad}    {', '.join(targets)}{',' if len(targets) == 1 else ''} = inputs")
        self.have |= {n for n in plan.inputs if n in self.layout.buffers}
        for name in constants:
            self.emit(f"{self.layout.local[name]} = _c_{self.layout.local[name]}")
            self.have.add(name)
        self._bind_and_check()
        last = last_uses(self.p, self.constants)
        if take and targets:
            self._let_inputs_go(targets, last)
        for k, step in enumerate(self.p.steps):
            if isinstance(step, Segment):
                self._segment(step)
            elif isinstance(step, InterpretedKernel):
                self._interpreted(step)
            else:
                self.call_extern(k, step)
            dead = sorted(n for n in self.have if last.get(n, -1) == k)
            if dead:  # free storage as soon as nothing reads it (ATen results keep what they alias alive)
                self.emit(f"del {', '.join(self.layout.local[n] for n in dead)}")
                self.have -= set(dead)
        outs = [self.tensor(o) if isinstance(o, str) else self.py(to_expr(o.expr)) for o in plan.outputs]
        self.emit(f"return [{', '.join(outs)}]")
        self.profiled, self.indent = False, 0
        return head + [f"{pad}    try:"] + self.lines + [f"{pad}    except _UseFallback:",
                                                       f"{pad}        return _fallback(inputs)"]

    def _let_inputs_go(self, targets: list[str], last: dict[str, int]) -> None:
        """A consuming call empties its inputs list (see the module's docstring). An input no step reads (an
        `_unused` target, or one read for its sizes only) is deleted now, the others after their last use; a
        symbol's int stays, as does an input the outputs are made from."""
        self.emit("if _take:")
        self.emit("_ready()", 3)
        self.emit("inputs.clear()", 3)
        kept = kept_to_the_end(self.p, self.constants)
        idle = [t for n, t in zip(self.plan.inputs, targets) if t.startswith("_unused")]
        idle += [self.layout.local[n] for n in self.plan.inputs
                 if n in self.layout.buffers and n not in last and n not in kept]
        if idle:
            self.emit(f"del {', '.join(dict.fromkeys(idle))}")
            self.have -= {n for n in self.plan.inputs if n in self.layout.buffers and self.layout.local[n] in idle}

    def _targets(self) -> list[str]:
        out = []
        for k, n in enumerate(self.plan.inputs):
            if n in self.layout.buffers:
                out.append(self.layout.local[n])
            elif n in self.layout.sym_local:
                out.append(self.layout.sym_local[n])
            else:
                out.append(f"_unused{k}")
        return out

    def _bindings(self, depth: int) -> list[str]:
        out = []
        for sym, expr in self.layout.bindings():
            local = self.layout.sym_local[sym]
            if expr.startswith("int(inputs"):
                out.append("    " * depth + f"{local} = int({local})")
            else:
                out.append("    " * depth + f"{local} = {expr}")
        return out

    def checked_inputs(self) -> list[tuple[int, Buffer]]:
        """Inputs whose layout the fast path relies on: kernels address them, or views are made of them."""
        out = []
        for k, n in enumerate(self.plan.inputs):
            b = self.layout.buffers.get(n)
            if b is not None and (n in self.kernel_roots or n in self.viewed_roots):
                out.append((k, b))
        return out

    def _bind_and_check(self) -> None:
        self.lines += self._bindings(2 + self.indent)
        tests = self._range_tests("<")
        for _, b in self.checked_inputs():
            local = self.layout.local[b.name]
            tests.append(f"{local}.shape != {self.tup(b.shape)} or {local}.stride() != {self.tup(b.stride)}")
        if tests:
            self.emit(f"if {' or '.join(tests)}:")
            self.emit("return _relayout(inputs)", 3)

    def _range_tests(self, op: str) -> list[str]:
        """Symbols against the lower bounds the plan assumes (a divisor may be a symbol)."""
        return [f"{self.layout.sym_local[s]} {op} {self.layout.lowers[s]}" for s in self.layout.symbols
                if self.layout.lowers.get(s, 0) > 0]

    def _layouts_fn(self) -> list[str]:
        """`_layouts(inputs)`: whether the symbols are in range, and the (index, shape, stride, may_copy) of each
        checked input, for these inputs."""
        aliased = {self.layout.root(o) for o in self.plan.outputs if isinstance(o, str)}
        lines = ["def _layouts(inputs):"]
        targets = self._targets()
        if targets:
            lines.append(f"    {', '.join(targets)}{',' if len(targets) == 1 else ''} = inputs")
        lines += self._bindings(1)
        items = [f"({k}, {self.tup(b.shape)}, {self.tup(b.stride)}, {b.name not in aliased})"
                 for k, b in self.checked_inputs()]
        ranges = " and ".join(self._range_tests(">=")) or "True"
        lines.append(f"    return {ranges}, [{', '.join(items)}]")
        return lines

    # ------------------------------------------------------------------ steps

    def _allocate(self, writes) -> None:
        for r in sorted(writes, key=list(self.layout.buffers).index):
            if r in self.allocated or not self.layout.is_owner(r):
                continue
            b = self.layout.buffers[r]
            if self.fast_cpu:
                self.emit(f"{self.layout.local[r]} = _empty_cpu({self.tup(b.shape)}, {self.tup(b.stride)}, "
                          f"{self.dtype(b.dtype)})")
            else:
                self.emit(f"{self.layout.local[r]} = _empty_strided({self.tup(b.shape)}, {self.tup(b.stride)}, "
                          f"dtype={self.dtype(b.dtype)}, device=_device)")
            self.allocated.add(r)
            self.have.add(r)

    def _segment(self, seg: Segment) -> None:
        self._allocate(seg.writes)
        if self.profiled:
            self.call_segment_profiled(seg)
        else:
            self.call_segment(seg)

    def call_segment(self, seg: Segment) -> None:
        """Emit the call of one segment; its outputs are allocated. `self.tensor(root)` gives a root's local,
        `self.layout.sym_local` the symbols' locals; a nonzero error flag should `return _on_error(inputs)`."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to call a segment")

    def call_segment_profiled(self, seg: Segment) -> None:
        """The same, in the profiled twin: each kernel inside `with self.ranged(kernel.name):`. By default the
        segment runs as one range named after it."""
        with self.ranged(seg.name):
            self.call_segment(seg)

    def call_extern(self, index: int, ext: Extern) -> None:
        """Emit the extern call at program step `index` (in its profiler range); a codegen may run something else
        in its place first (codegen-triton's matmul templates)."""
        with self.ranged(self.p.extern_name(index)):
            self._extern(ext)

    def _interpreted(self, step: InterpretedKernel) -> None:
        touched = list(dict.fromkeys(i.buffer for i in step.kernel.instrs() if i.buffer))
        writes = {self.layout.root(i.buffer) for i in step.kernel.instrs() if i.op.value == "store"}
        self._allocate(writes)
        if id(step) not in self._interpreters:  # one for the wrapper and its twin
            self._interpreters[id(step)] = interpreted_kernel(self.plan, step, touched, self.layout.symbols)
        name = self.const(self._interpreters[id(step)], "_interp")
        args = [self.tensor(b) for b in touched] + [self.layout.sym_local[s] for s in self.layout.symbols]
        with self.ranged(step.name or step.kernel.name):
            self.emit(f"{name}([{', '.join(args)}])")

    def extern_call(self, ext: Extern) -> str:
        """The expression that runs the extern: its ATen op on its arguments. A codegen may call something else that
        gives the same result (codegen-cpp: a matmul on oneDNN where that is faster)."""
        fn = self.const(direct_call(resolve_op(ext.op)), "_op")
        args = [self._arg(a) for a in ext.args] + [f"{keyword_name(k)}={self._arg(v)}" for k, v in ext.kwargs.items()]
        return f"{fn}({', '.join(args)})"

    def _extern(self, ext: Extern) -> None:
        op = resolve_op(ext.op)
        outs = [o for o in ext.outs]
        call = self.extern_call(ext)
        if len(outs) == 1:
            if outs[0] == "_":
                self.emit(f"{call}  # {ext.op}")
            else:
                pick = "[0]" if returns_sequence(op) else ""
                self.emit(f"{self.layout.local[outs[0]]} = {call}{pick}  # {ext.op}")
        else:
            self.emit(f"_r = {call}  # {ext.op}")
            for j, o in enumerate(outs):
                if o != "_":
                    self.emit(f"{self.layout.local[o]} = _r[{j}]")
        for o in outs:
            if o == "_":
                continue
            self.have.add(o)
            b, local = self.layout.buffers[o], self.layout.local[o]
            dt = self.dtype(b.dtype)
            # an op's dtype rule that disagrees with ATen: never run on. An output ATen leaves undefined (None:
            # `mkldnn_rnn_layer`'s workspace when not training) where its fake kernel gave an empty tensor passes.
            self.emit(f"if {local} is not None and {local}.dtype is not {dt}:")
            self.emit(f"_wrong_dtype({self.const(ext.op, '_name')}, {local}, {dt})", 3)
            if o in self.kernel_roots or o in self.viewed_roots:
                sh, st = self.tup(b.shape), self.tup(b.stride)
                self.emit(f"if {local}.shape != {sh} or {local}.stride() != {st}:")
                self.emit(f"{local} = _fix_layout({local}, {sh}, {st})", 3)

    def _arg(self, a: Any) -> str:
        if isinstance(a, Item):
            return f"{self.tensor(a.name)}.item()"
        if isinstance(a, Ref):
            return self.tensor(a.name)
        if isinstance(a, Sym):
            return self.py(to_expr(a.expr))
        if isinstance(a, sympy.Basic):
            return self.py(a)
        if isinstance(a, (tuple, list)):
            return "[" + ", ".join(self._arg(x) for x in a) + "]"
        if a is None or isinstance(a, (bool, int, str)) or (isinstance(a, float) and math.isfinite(a)):
            return repr(a)
        return self.const(a)
