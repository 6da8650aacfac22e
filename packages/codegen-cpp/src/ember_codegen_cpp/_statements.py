"""How the statements of a kernel are spelled in C++: its `Loop` blocks and its instructions.

`StatementPrinter` is the part of `KernelPrinter` (`_kernel_printer.py`) below the loop nests: a `Loop` block (the
serial r-loops around a lane loop in vector steps, each reduction's accumulator declared, updated and merged; a
whole-tensor reduction's block in parallel chunks, `_chunked`), and each instruction: values, loads and stores
with their bounds tests and error flags. It reads the state the kernel printer keeps while it walks: `accs`,
`locals` (the kernel's stack arrays), `in_loop` (a loop is being printed), `block` (values live in block
arrays), `ssa_nonneg`, `uses_err`, and `expr`.

A division is printed as a division, also by a value computed outside the loop: one rounding, as eager's `x / s`
(multiplying by a reciprocal computed once gave 1-ulp differences in a quarter of the elements). Where eager
multiplies by a reciprocal (its softmax), the plan says so, and lowering's hoisting computes it once a row. Names
follow one rule: an SSA value (unique in its kernel) and a name carrying the loop's number (`ember_steps2`) may
live in the row's scope.
"""

from __future__ import annotations

import sympy
from ember_core import as_sympy
from ember_lowering import REDUCTIONS, Instr, Loop, Op, flat_index
from ember_lowering.codegen import CannotPrint, KernelWalk

from ._cpp_rules import CTYPE, cast, expression, flags_error, literal
from ._reductions import CHUNK_MIN, CHUNKS, FOLD, LANES, Accumulator, Partials, inverse_count, welford_count
from ._vector import VectorBody


class StatementPrinter(KernelWalk):
    """A kernel's loop blocks and instructions as C++ lines (see the module docstring)."""

    part_pointers = True  # a part is a parameter of its own: the call adds its offset (`_program.kernel_args`)

    # ------------------------------------------------------------------ loop blocks

    def _block(self, stmts, depth: int) -> list[str]:
        out: list[str] = []
        run: list[str] = []  # outer statements of a block kernel, run together over the block's i-points
        run_instrs: list[Instr] = []
        for s in stmts:
            if isinstance(s, Loop):
                if run:
                    out += self._block_loop(run, "  " * depth, run_instrs)
                    run, run_instrs = [], []
                out += self._outer_loop(s, depth) if self.block else self._loop(s, depth)
            elif self.block and s.outs and s.outs[0] in self.uniform:  # the same for every i-point: one scalar
                self.block = False
                out += [("  " * depth) + line for line in self._instr(s, None)]
                self.block = True
            elif self.block:
                run += self._instr(s, None)
                run_instrs.append(s)
            else:
                out += [("  " * depth) + line for line in self._instr(s, None)]
        if run:
            out += self._block_loop(run, "  " * depth, run_instrs)
        return out

    def _loop(self, loop: Loop, depth: int) -> list[str]:
        return self._lane_loop(loop, depth) if self.k.outer_dims else self._chunked(loop, depth, self._lane_loop)

    def _span(self, dim) -> tuple[str, str]:
        """The C++ bounds of r-dim `dim` in the loop being printed: all of it, or a chunk's part."""
        return ("ember_lo", "ember_hi") if dim.var == self.split else ("0", f"n_{dim.var}")

    def _chunked(self, loop: Loop, depth: int, print_loop) -> list[str]:
        """A loop of a kernel without i-dims as a parallel loop over at most `CHUNKS` chunks of its outermost r-dim,
        each of at least `CHUNK_MIN` elements (a multiple of `LANES` when the split dim is the lane dim). Each chunk
        prints as the loop over its part, then saves its accumulators' results; they combine after the loop."""
        first, *rest = self.k.reduce_dims
        self.split = first.var
        body = print_loop(loop, depth + 1)
        self.split = None
        k = self.loop_id
        parts = [Partials(a) for a in self.accs.values()]
        n, pad = f"n_{first.var}", "  " * depth
        inner = " * ".join(f"n_{d.var}" for d in rest)
        cs, cn = f"ember_cs{k}", f"ember_cn{k}"
        least = f"{CHUNK_MIN} / ({inner} > 0 ? {inner} : 1)" if rest else str(CHUNK_MIN)  # rows of CHUNK_MIN
        size = [f"int64_t {cs} = ({n} + {CHUNKS - 1}) / {CHUNKS};", f"if ({cs} < {least}) {cs} = {least};"]
        if rest:
            size.append(f"if ({cs} < 1) {cs} = 1;")
        else:
            size.append(f"{cs} = ({cs} + {LANES - 1}) / {LANES} * {LANES};")
        size.append(f"const int64_t {cn} = {n} > {cs} ? ({n} + {cs} - 1) / {cs} : 1;")
        work = " * ".join(f"n_{d.var}" for d in self.k.reduce_dims)
        par = self._parallel_head(cn, f"({work})")
        return [*[pad + line for line in size + [x for p in parts for x in p.decl()]],
                *[pad + line[2:] for line in par],
                pad + f"  const int64_t ember_lo = ember_p * {cs};",
                pad + f"  const int64_t ember_hi = ember_lo + {cs} < {n} ? ember_lo + {cs} : {n};",
                *body,
                *[pad + "  " + line for p in parts for line in p.save("ember_p")],
                pad + "}",
                *[pad + line for p in parts for line in p.combine(cn)]]

    def _lane_loop(self, loop: Loop, depth: int) -> list[str]:
        *serial, last = self.k.reduce_dims
        self.loop_id += 1
        k = self.loop_id
        sizes = [as_sympy(d.size) for d in self.k.reduce_dims]
        row = int(sympy.Mul(*sizes)) if self.split is None and all(s.is_Integer for s in sizes) else None
        accs = [Accumulator(i, self._src_dtype(i), k, shifted=True, row=row) for i in loop.body if i.op in REDUCTIONS]
        self.accs = {a.i.out: a for a in accs}
        self.in_loop = True
        # The tail's element r goes to lane r % LANES, as in the lane loop: a short row (n < LANES, every element
        # in the tail) then still sums in LANES partial sums, not one chain (kron's gradient, 200 elements in rows
        # of 20, was 5x further from the exact sum than eager's).
        tail_lane = f"(ember_rb & {LANES - 1})"
        tail = [line for i in loop.body for line in self._instr(i, tail_lane if accs else None, tail=True)]
        vector = VectorBody(self, self.lanes, last.var, reduce_lane="(ember_j + ember_l)")
        vector_body = vector.lines(list(loop.body))
        self.lane_ops += vector.lane_ops
        self.in_loop = False
        pad = "  " * depth
        out = [pad + line for a in accs for line in a.init()]
        welford = sorted({a.state for a in accs if a.welford})
        decls = [f"int64_t ember_steps{k} = 0;"] if any(a.cascade for a in accs) else []
        decls += [f"int64_t {welford_count(k)} = 0;"] if welford else []
        pad, inner = _open_block(out, pad, [(d, *self._span(d)) for d in serial], decls)
        counts = [f"++{welford_count(k)};"] if welford else []
        counts += [f"const {CTYPE[t]} {inverse_count(k, t)} = ({CTYPE[t]})1 / ({CTYPE[t]}){welford_count(k)};"
                   for t in welford]
        flush = [line for a in accs for line in a.flush(f"ember_steps{k}")]
        lo, n = self._span(last)
        width = LANES if accs else self.lanes  # elements per step: the accumulators' lanes, or one vector
        step = [
            *counts,
            f"for (int64_t ember_j = 0; ember_j < {width}; ember_j += {self.lanes}) {{",
            "  const int64_t ember_v = ember_rb + ember_j;",
            f"  const int64_t {last.var} = ember_v;",
            *["  " + line for line in vector_body],
            "}",
        ]
        out.append(inner + f"int64_t ember_rb = {lo};")
        if flush:  # the lanes fold into the cascade once per chunk, outside the loop that keeps them in registers
            out += [inner + f"const int64_t ember_rf = {n} - ({n} - {lo}) % {LANES};",
                    inner + "while (ember_rb < ember_rf) {",
                    inner + f"  const int64_t ember_ce = ember_rb + {FOLD} < ember_rf ? ember_rb + {FOLD} : ember_rf;",
                    inner + f"  for (; ember_rb < ember_ce; ember_rb += {LANES}) {{",
                    *[inner + "    " + line for line in step],
                    inner + "  }",
                    inner + f"  ++ember_steps{k};",
                    *[inner + "  " + line for line in flush],
                    inner + "}"]
        else:
            out += [inner + f"for (; ember_rb + {width} <= {n}; ember_rb += {width}) {{",
                    *[inner + "  " + line for line in step],
                    inner + "}"]
        out += [
            inner + f"for (; ember_rb < {n}; ++ember_rb) {{",
            inner + f"  const int64_t {last.var} = ember_rb;",
            *[inner + "  " + line for line in tail],
            inner + "}",
        ]
        out += [pad + "  " * j + "}" for j in reversed(range(len(serial)))]
        out.append(pad[:-2] + "}")
        for a in accs:
            for o in a.i.outs:
                self.dtypes[o] = a.i.dtype
                self.names.setdefault(o, o)  # an index expression may read it (an indirect load by argmax)
            out += [pad[:-2] + line for line in a.merge()]
        return out

    def _src_dtype(self, i: Instr) -> str:
        """The dtype of a reduce's first operand (defined before it in its loop)."""
        for j in self.k.instrs():
            if i.srcs[0] in j.outs:
                return j.dtype
        raise CannotPrint(f"operand {i.srcs[0]} of {i.op.value} is not defined")

    # ------------------------------------------------------------------ instructions

    def _instr(self, i: Instr, lane: str | None, tail: bool = False) -> list[str]:
        op = i.op
        if op in REDUCTIONS:
            if lane is None or i.out not in self.accs:
                raise CannotPrint(f"{op.value} outside a loop")
            return self.accs[i.out].update([self.ref(x) for x in i.srcs], lane, tail)
        if op is Op.STORE:
            return self._store(i)
        for o in i.outs:
            self.dtypes[o] = i.dtype
            self.names.setdefault(o, o)
            if i.dtype in ("uint8", "bool"):
                self.ssa_nonneg.add(o)
        t = CTYPE[i.dtype]
        if self.block and not self.in_loop:  # a block value: define a local, then keep it
            lines = self._compute(i, t)
            return lines + [f"{self.names[o]} = {o};" for o in i.outs]
        return self._compute(i, t)

    def _compute(self, i: Instr, t: str) -> list[str]:
        op = i.op
        if op is Op.LOAD:
            return self._load(i)
        if op is Op.CONST:
            return [f"const {t} {i.out} = {literal(i.value, i.dtype)};"]
        if op is Op.INDEX:
            return [f"const {t} {i.out} = {cast(self.expr(i.index[0]), 'int64', i.dtype)};"]
        src = [self.dtypes[s] for s in i.srcs]
        a = [self.ref(x) for x in i.srcs]
        line = f"const {t} {i.out} = {expression(op, a, src, i.dtype)};"
        if flags_error(op, src):
            self.uses_err = True
            return [line, f"ember_err |= ({a[1]} == 0);"]
        return [line]

    def _address(self, i: Instr) -> tuple[str, str]:
        """(root pointer, flat index) of a load's or store's element."""
        return self.layout.local[self.pointer(i.buffer)], self.expr(self.flat(i))

    def _local(self, i: Instr) -> str:
        """The element of a local (a stack array of this kernel's row) that a load or store addresses."""
        b = self.locals[i.buffer]
        return f"{self.layout.local[i.buffer]}[{self.expr(flat_index(i.index, b.stride, 0, self.ranges))}]"

    def _load(self, i: Instr) -> list[str]:
        if i.buffer in self.locals:
            return [f"const {CTYPE[i.dtype]} {i.out} = {self._local(i)};"]
        self.read_root(i.buffer)
        ptr, flat = self._address(i)
        value = f"{ptr}[{flat}]"
        dtype = self.layout.buffers[i.buffer].dtype
        if dtype in ("bfloat16", "float16"):
            value = f"ember_load_{'bf16' if dtype == 'bfloat16' else 'f16'}({value})"
        conds, lines = [self.ref(x) for x in i.srcs[:1]], []
        ok = self._bounds(i)
        if ok:
            self.uses_err = True
            lines.append(f"const bool ember_ok_{i.out} = {ok};")
            guard = f"{conds[0]} && " if conds else ""
            lines.append(f"ember_err |= ({guard}!ember_ok_{i.out});")
            conds.append(f"ember_ok_{i.out}")
        if conds:
            other = literal(i.value if i.value is not None else 0, i.dtype)
            value = f"({' && '.join(conds)}) ? {value} : {other}"
        return lines + [f"const {CTYPE[i.dtype]} {i.out} = {value};"]

    def _bounds(self, i: Instr) -> str | None:
        """The in-bounds test of an indirect load (one whose index reads SSA values), else None."""
        tests = [f"(uint64_t)({self.expr(e)}) < (uint64_t)({self.expr(size)})" for e, size in self.indirect(i)]
        return " && ".join(tests) if tests else None

    def _store(self, i: Instr) -> list[str]:
        if i.buffer in self.locals:
            return [f"{self._local(i)} = {self.ref(i.srcs[0])};"]
        self.write_root(i.buffer)
        ptr, flat = self._address(i)
        value = self.ref(i.srcs[0])
        dtype = self.layout.buffers[i.buffer].dtype
        if dtype in ("bfloat16", "float16"):
            value = f"ember_store_{'bf16' if dtype == 'bfloat16' else 'f16'}({value})"
        line = f"{ptr}[{flat}] = {value};"
        return [f"if ({self.ref(i.srcs[1])}) {line}" if len(i.srcs) > 1 else line]


def _open_block(out: list[str], pad: str, serial: list, decls: list[str]) -> tuple[str, str]:
    """Open a reduction loop's block in `out`: its counters' declarations (named for the loop), a brace and the
    serial r-loops (`serial`: (dim, lo, hi) each). Returns the block's indent and the innermost serial loop's."""
    out += [pad + d for d in decls]
    out.append(pad + "{")
    pad += "  "
    out += _serial_loops(pad, serial)
    return pad, pad + "  " * len(serial)


def _serial_loops(pad: str, serial) -> list[str]:
    """The opening lines of the serial loop nest over `serial` ((dim, lo, hi) each), each nested one deeper."""
    return [pad + "  " * j + f"for (int64_t {d.var} = {lo}; {d.var} < {hi}; ++{d.var}) {{"
            for j, (d, lo, hi) in enumerate(serial)]
