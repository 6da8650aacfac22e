"""One loop-IR kernel as one C++ function: an OpenMP-parallel outer loop and inner loops over explicit vectors.

    static int k0_pointwise_6x8(const float* __restrict b_x, float* __restrict b_out, int64_t S_s0)

returns the kernel's error flag (an integer division by zero, an index out of bounds). Three shapes of loop nest,
each inner loop printed twice: in vector steps (`_vector.py`: `lanes` elements at a time) and as scalar code for
the elements that fill no whole step:

- pointwise (no r-dims): the i-dims but the last, times chunks of the last, are one flat parallel loop; the
  last i-dim runs in vector steps, over contiguous memory when the layout is row-major.
- reduction: all i-points are one flat parallel loop; each `Loop` block runs the r-dims, the rest serially and
  the last in steps of `LANES` elements, each reduction keeping `LANES` partial results (two or more vectors:
  independent add chains; see `_reductions.py`).
- outer-contiguous reduction (a column sum): lanes are `BLOCK` consecutive i-points; the r-dims run serially
  around vector steps over the block, whose values live in block arrays.
- whole-tensor reduction (r-dims, no i-dims: `x.sum()`, a loss): there are no i-points to share out, so each
  `Loop` is its own parallel loop over chunks of its outermost r-dim (`_chunked`), each chunk the loop above over
  its part of the range, with its own accumulators; their results combine in a fixed order (`Partials`).

Inside a loop, a division by a value computed outside it multiplies by its reciprocal (computed once, as
torch's own softmax does). Names follow one rule: an SSA value (unique in its kernel) and a name carrying the
loop's number (`ember_steps2`) may live in the row's scope; a name made from what it computes (`ember_rcp_t1`,
the reciprocal of t1) is declared inside its loop's block, since sibling loops (softmax's backward divides by
the same row sum in three) each make their own.

The plan decides the rest: dims arrive merged (`coalesce-dims`), and a `local` buffer (`stash-values`) is a
per-row stack array, declared inside the parallel loop. When lanes are i-points the kernel is printed with its
stashes recomputed (`recompute_locals`): a stash would be one row per lane. The parallel loop only forks when the
work is at least `EMBER_PAR_MIN` element-iterations (16384: on 2 cores a fork pays off from about 8K elements of
a sigmoid; cheap ops need more).

Under a max-autotune mode the same kernel is printed once per `Variant` (a parallel threshold, a tile size, a
vector width) and the fastest is measured on the first call (see `_autotune.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
from ember_core import as_sympy
from ember_lowering import (
    REDUCTIONS,
    Buffer,
    Instr,
    Kernel,
    Loop,
    Op,
    flat_index,
    recompute_locals,
)
from ember_lowering.codegen import CannotPrint, KernelWalk, PlanLayout, PrintedKernel

from ._build import vector_lanes
from ._cpp_rules import CTYPE, FLOATS, STORAGE_CTYPE, cast, expression, flags_error, literal
from ._exprs import ExprPrinter
from ._prelude import PAR_MIN
from ._reductions import CHUNK_MIN, CHUNKS, FOLD, LANES, Accumulator, Partials, inverse_count, welford_count
from ._vector import VectorBody

CHUNK = 4096  # elements of the last i-dim per parallel work item of a pointwise kernel
BLOCK = 128  # i-points per parallel work item of an outer-contiguous reduction (its lanes)
_SIMD = "#pragma omp simd"
_PARALLEL = "#pragma omp parallel for schedule(static)"
_ERR = " reduction(|:ember_err)"
SERIAL = 1 << 62  # a parallel threshold no loop reaches: the kernel never forks


@dataclass(frozen=True)
class Variant:
    """One way to print a kernel; the default is the heuristics' choice. `par_min`: element-iterations from which
    the parallel loop forks (0: `EMBER_PAR_MIN`); `tile`: `CHUNK` (pointwise) or `BLOCK` (outer-contiguous
    reduction) times this; `vector_bits`: the widest vectors the compiler should prefer (0: what -march=native
    prefers; 256 on an AVX-512 machine keeps to ymm registers)."""

    par_min: int = 0
    tile: int = 1
    vector_bits: int = 0

    @property
    def choice(self) -> tuple[int, int, int]:
        return (self.par_min, self.tile, self.vector_bits)


class KernelPrinter(KernelWalk):
    """Prints one kernel; `CannotPrint` if it uses anything the printer does not handle."""

    def __init__(self, kernel: Kernel, layout: PlanLayout, name: str, variant: Variant = Variant()):
        self.variant = variant
        self.chunk, self.block_size = CHUNK * variant.tile, BLOCK * variant.tile
        native = vector_lanes()
        self.lanes = 8 if variant.vector_bits == 256 and 8 in native else native[0]
        used = {i.buffer for i in kernel.instrs()}
        self.locals: dict[str, Buffer] = {n: b for n, b in layout.buffers.items() if b.kind == "local" and n in used}
        self.outer_contiguous = False
        if self.locals and not kernel.reduce_dims:
            raise CannotPrint("a local buffer in a kernel without r-dims")
        if kernel.reduce_dims:
            plain = recompute_locals(kernel, set(self.locals)) if self.locals else kernel
            self.outer_contiguous = _outer_contiguous(plain, layout)
            if self.outer_contiguous:
                kernel, self.locals = plain, {}
        super().__init__(kernel, layout, name)
        self.ssa_nonneg: set[str] = set()
        # x / c by a constant stays a division: x * (1/c) can differ by an ulp from eager's x / c (hardswish's / 6)
        self.constants = {i.out for i in kernel.instrs() if i.op is Op.CONST}
        self.expr = ExprPrinter(self.names, lambda n: 0 if n in self.loop_vars or n in self.ssa_nonneg else
                                layout.lowers.get(n))
        self.uses_err = False
        self.accs: dict[str, Accumulator] = {}
        self.loop_values: set[str] | None = None  # values defined in the loop being printed
        self.loop_head: dict[str, str] = {}  # that loop's own declarations: name → line, first in its block
        self.loop_id = 0
        self.block = False  # an outer-contiguous kernel: SSA values at outer level are arrays over a block
        # block arrays and stashes declared so far: C name → element C type (vector moves are checked against it)
        self.stack: dict[str, str] = {}
        self.lane_ops: list[str] = []  # ops of explicit vector loops printed lane by lane, for the report
        self.split: str | None = None  # the r-dim a whole-tensor reduction's chunk runs a part of (lo, hi)

    # ------------------------------------------------------------------ entry

    def print(self) -> PrintedKernel:
        body = self._body()
        roots = sorted(self.roots, key=list(self.layout.buffers).index)
        params = []
        for r in roots:
            const = "" if self.roots[r] else "const "
            params.append(f"{const}{STORAGE_CTYPE[self.layout.buffers[r].dtype]}* __restrict {self.layout.local[r]}")
        params += [f"int64_t {self.layout.sym_local[s]}" for s in self.layout.symbols]
        origins = self.origins_comment("//")
        wide = f'__attribute__((target("prefer-vector-width={self.variant.vector_bits}"))) ' \
            if self.variant.vector_bits else ""
        head = f"{wide}static int {self.name}({', '.join(params) or 'void'}) {{{origins}"
        text = "\n".join([head, "  int ember_err = 0;", *body, "  return ember_err;", "}"])
        if self.uses_err:  # known once the body is printed: add the flag to every loop pragma
            text = text.replace(_SIMD, _SIMD + _ERR).replace(_PARALLEL, _PARALLEL + _ERR)
        return PrintedKernel(self.name, tuple(roots), self.written(), text,
                             simd=self._simd())

    def _simd(self) -> str:
        """How the kernel uses SIMD, for the vectorization report."""
        if not self.k.dims:
            return "scalar: one element"
        lane_ops = f", lane by lane: {', '.join(dict.fromkeys(self.lane_ops))}" if self.lane_ops else ""
        return f"explicit {self.lanes} lanes{lane_ops}"

    def variants(self, wide_vectors: bool) -> list[Variant]:
        """What max-autotune tries for this kernel, the default first: where there is a parallel loop, the other
        side of the fork (of static sizes: serial where the heuristics fork, parallel where they do not; of
        symbolic ones: a lower threshold and never) and a larger tile; 256-bit vectors on a machine with wider ones
        (`wide_vectors`)."""
        out = [Variant()]
        if self.k.outer_dims or self.k.reduce_dims:
            work = self._parallel_work()
            if work is None:
                out += [Variant(par_min=4096), Variant(par_min=SERIAL)]
            else:
                out.append(Variant(par_min=SERIAL) if work >= PAR_MIN else Variant(par_min=1))
            if not self.k.reduce_dims or self.outer_contiguous:
                out.append(Variant(tile=4))
        if wide_vectors:
            out.append(Variant(vector_bits=256))
        return out

    def _parallel_work(self) -> int | None:
        """The element-iterations the parallel loop's fork test compares with the threshold, when static."""
        loops = sum(1 for s in self.k.body if isinstance(s, Loop)) if self.k.outer_dims else 1
        work = sympy.Mul(*[as_sympy(d.size) for d in self.k.dims]) * max(loops, 1)
        return int(work) if work.is_Integer else None

    def _body(self) -> list[str]:
        out = [f"  const int64_t n_{d.var} = {self.expr(d.size)};" for d in self.k.dims]
        if not self.k.reduce_dims:
            return out + self._pointwise()
        if self.outer_contiguous:
            return out + self._outer_reduction()
        return out + self._reduction()

    def ref(self, name: str) -> str:
        """How C++ reads SSA value `name` here (an element of a block array for block values)."""
        return self.names.get(name, name)

    # ------------------------------------------------------------------ loop nests

    def _parallel_head(self, count: str, work: str) -> list[str]:
        par_min = self.variant.par_min or "EMBER_PAR_MIN"
        return [f"  {_PARALLEL} if({count} > 1 && {work} >= {par_min})",
                f"  for (int64_t ember_p = 0; ember_p < {count}; ++ember_p) {{"]

    def _decompose(self, dims: list, start: str = "ember_p") -> list[str]:
        if not dims:
            return []
        if len(dims) == 1:
            return [f"    const int64_t {dims[0].var} = {start};"]
        out = [f"    int64_t ember_q = {start};"]
        for d in reversed(dims[1:]):
            out.append(f"    const int64_t {d.var} = ember_q % n_{d.var}; ember_q /= n_{d.var};")
        out.append(f"    const int64_t {dims[0].var} = ember_q;")
        return out

    def _pointwise(self) -> list[str]:
        dims = list(self.k.outer_dims)
        if not dims:
            return self._block(self.k.body, 1)
        *outer, last = dims
        body = self._block(self.k.body, 3)
        n, chunk = f"n_{last.var}", self.chunk
        vector = VectorBody(self, self.lanes, last.var)
        vector_body = vector.lines(list(self.k.body))
        self.lane_ops += vector.lane_ops
        return [
            f"  const int64_t ember_nc = ({n} + {chunk - 1}) / {chunk};",
            f"  const int64_t ember_np = {' * '.join([f'n_{d.var}' for d in outer] + ['ember_nc'])};",
            *self._parallel_head("ember_np", f"({' * '.join(f'n_{d.var}' for d in dims)})"),
            *self._decompose(outer, "ember_p / ember_nc"),
            f"    const int64_t ember_lo = (ember_p % ember_nc) * {chunk};",
            f"    const int64_t ember_hi = ember_lo + {chunk} < {n} ? ember_lo + {chunk} : {n};",
            "    int64_t ember_v = ember_lo;",
            f"    for (; ember_v + {self.lanes} <= ember_hi; ember_v += {self.lanes}) {{",
            f"      const int64_t {last.var} = ember_v;",
            *["      " + line for line in vector_body],
            "    }",
            f"    for (int64_t {last.var} = ember_v; {last.var} < ember_hi; ++{last.var}) {{",
            *body,
            "    }",
            "  }",
        ]

    def _reduction(self) -> list[str]:
        outer = list(self.k.outer_dims)
        loops = sum(1 for s in self.k.body if isinstance(s, Loop))
        depth = 2 if outer else 1
        stash = [("  " * depth) + self._declare(self.layout.local[n], CTYPE[b.dtype], sympy.Mul(*b.shape))
                 for n, b in self.locals.items()]
        body = stash + self._block(self.k.body, depth)
        if not outer:
            return body
        count = " * ".join(f"n_{d.var}" for d in outer)
        work = " * ".join([f"n_{d.var}" for d in self.k.dims] + [str(max(loops, 1))])
        return [
            f"  const int64_t ember_np = {count};",
            *self._parallel_head("ember_np", f"({work})"),
            *self._decompose(outer),
            *body,
            "  }",
        ]

    def _outer_reduction(self) -> list[str]:
        """Lanes are `BLOCK` consecutive i-points along the last i-dim; the r-dims run serially around them."""
        *outer, last = self.k.outer_dims
        values = [o for stmt in self.k.body for i in (stmt.body if isinstance(stmt, Loop) else (stmt,))
                  for o in i.outs if (not isinstance(stmt, Loop) and i.op is not Op.CONST) or i.op in REDUCTIONS]
        self.block = True
        for o in values:
            self.names[o] = f"ember_b_{o}[ember_j]"
        dtype = {o: i.dtype for i in self.k.instrs() for o in i.outs}
        block = self.block_size
        arrays = ["    " + self._declare(f"ember_b_{o}", CTYPE[dtype[o]], block) for o in values]
        body = self._block(self.k.body, 2)
        count = " * ".join([f"n_{d.var}" for d in outer] + ["ember_nb"])
        loops = sum(1 for st in self.k.body if isinstance(st, Loop))
        work = " * ".join([f"n_{d.var}" for d in self.k.dims] + [str(max(loops, 1))])
        n = f"n_{last.var}"
        return [
            f"  const int64_t ember_nb = ({n} + {block - 1}) / {block};",
            f"  const int64_t ember_np = {count};",
            *self._parallel_head("ember_np", f"({work})"),
            *self._decompose(outer, "ember_p / ember_nb"),
            f"    const int64_t ember_lo = (ember_p % ember_nb) * {block};",
            f"    const int64_t ember_bn = ember_lo + {block} < {n} ? {block} : {n} - ember_lo;",
            *arrays,
            *body,
            "  }",
        ]

    def _declare(self, array: str, ctype: str, size) -> str:
        """The declaration of a stack array of the row or block (`ctype` elements), remembered for the check of
        every vector move of it (`check_stack_vector`)."""
        self.stack[array] = ctype
        return f"{ctype} {array}[{size}];"

    def _block_loop(self, lines: list[str], pad: str, instrs: list[Instr] | None = None) -> list[str]:
        """lines run for each i-point of the block (outer-contiguous kernels): in vector steps over the block
        when `instrs` (what `lines` print) is given, the rest (and plain result lines) as scalar code."""
        last = self.k.outer_dims[-1].var
        out = []
        if instrs is not None:
            vector = VectorBody(self, self.lanes, last, reduce_lane="ember_j", block=True)
            body = vector.lines(instrs)
            self.lane_ops += vector.lane_ops
            inner = pad + "  "
            out = [inner + "int64_t ember_jv = 0;",
                   inner + f"for (; ember_jv + {self.lanes} <= ember_bn; ember_jv += {self.lanes}) {{",
                   inner + "  const int64_t ember_j = ember_jv, ember_v = ember_lo + ember_jv;",
                   inner + f"  const int64_t {last} = ember_v;",
                   *[inner + "  " + x for x in body], inner + "}"]
        start = "ember_jv" if instrs is not None else "0"
        return [pad + "{", *out,
                pad + f"  for (int64_t ember_j = {start}; ember_j < ember_bn; ++ember_j) {{",
                pad + f"    const int64_t {last} = ember_lo + ember_j;", *[pad + "    " + x for x in lines],
                pad + "  }", pad + "}"]

    def _outer_loop(self, loop: Loop, depth: int) -> list[str]:
        self.loop_id += 1
        k = self.loop_id
        accs = [Accumulator(i, self._src_dtype(i), k, self.block_size, block=True) for i in loop.body
                if i.op in REDUCTIONS]
        self.accs = {a.i.out: a for a in accs}
        self.loop_values = set()
        body = [line for i in loop.body for line in self._instr(i, "ember_j" if accs else None)]
        instrs = list(loop.body)
        pad = "  " * depth
        out = [pad + line for a in accs for line in a.init()]
        if any(a.cascade for a in accs):
            out.append(pad + f"int64_t ember_steps{k} = 0;")
        welford = sorted({a.state for a in accs if a.welford})
        if welford:
            out.append(pad + f"int64_t {welford_count(k)} = 0;")
        rdims = self.k.reduce_dims
        out += [pad + "  " * j + f"for (int64_t {d.var} = 0; {d.var} < n_{d.var}; ++{d.var}) {{"
                for j, d in enumerate(rdims)]
        inner = pad + "  " * len(rdims)
        if welford:
            out.append(inner + f"++{welford_count(k)};")
            out += [inner + f"const {CTYPE[t]} {inverse_count(k, t)} = ({CTYPE[t]})1 / ({CTYPE[t]}){welford_count(k)};"
                    for t in welford]
        out += self._block_loop(body, inner, instrs)
        self.loop_values = None
        flush = [line for a in accs for line in a.flush(f"ember_steps{k}")]
        if flush:
            out += [inner + f"++ember_steps{k};", *[inner + line for line in flush]]
        out += [pad + "  " * j + "}" for j in reversed(range(len(rdims)))]
        results = [f"ember_b_{o}[ember_j] = {expr};" for a in accs for o, expr in a.results("ember_j")]
        for a in accs:
            for o in a.i.outs:
                self.dtypes[o] = a.i.dtype
        return out + (self._block_loop(results, pad) if results else [])

    # ------------------------------------------------------------------ statements

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
            elif self.block and s.op is Op.CONST:  # the same for every i-point: one scalar
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
        self.loop_values, self.loop_head = set(), {}
        # The tail's element r goes to lane r % LANES, as in the lane loop: a short row (n < LANES, every element
        # in the tail) then still sums in LANES partial sums, not one chain (kron's gradient, 200 elements in rows
        # of 20, was 5x further from the exact sum than eager's).
        tail_lane = f"(ember_rb & {LANES - 1})"
        tail = [line for i in loop.body for line in self._instr(i, tail_lane if accs else None, tail=True)]
        vector = VectorBody(self, self.lanes, last.var, reduce_lane="(ember_j + ember_l)")
        vector_body = vector.lines(list(loop.body))
        self.lane_ops += vector.lane_ops
        self.loop_values = None
        pad = "  " * depth
        out = [pad + line for a in accs for line in a.init()]
        welford = sorted({a.state for a in accs if a.welford})
        decls = [f"int64_t ember_steps{k} = 0;"] if any(a.cascade for a in accs) else []
        decls += [f"int64_t {welford_count(k)} = 0;"] if welford else []
        pad, inner = _open_block(out, pad, [(d, *self._span(d)) for d in serial], decls,
                                 list(self.loop_head.values()))
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
            if self.loop_values is not None:
                self.loop_values.add(o)
        t = CTYPE[i.dtype]
        if self.block and self.loop_values is None:  # a block value: define a local, then keep it
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
        if op is Op.DIV and src[0] in FLOATS and self.loop_values is not None and i.srcs[1] not in self.loop_values \
                and i.srcs[1] not in self.constants and not self.block:
            rcp = f"ember_rcp_{i.srcs[1]}"  # loop-invariant divisor: one division per loop, not per element
            one = "1.0" if src[1] == "float64" else "1.0f"
            self.loop_head[rcp] = f"const {t} {rcp} = {one} / {a[1]};"
            return [f"const {t} {i.out} = {a[0]} * {rcp};"]
        line = f"const {t} {i.out} = {expression(op, a, src, i.dtype)};"
        if flags_error(op, src):
            self.uses_err = True
            return [line, f"ember_err |= ({a[1]} == 0);"]
        return [line]

    def _address(self, i: Instr) -> tuple[str, str]:
        """(root pointer, flat index) of a load's or store's element."""
        return self.layout.local[self.layout.root(i.buffer)], self.expr(self.flat(i))

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


def _outer_contiguous(kernel: Kernel, layout: PlanLayout) -> bool:
    """Do the loops' accesses run contiguously along the last i-dim rather than the last r-dim? Then lanes are
    i-points (`_outer_reduction`), not r-steps. An access that does not move with the i-dim (layer norm's
    per-row mean in its weight gradient, a column sum over rows) is the same for every i-point lane, one value
    put in every lane: it does not count for r-steps. (Counting it made layer norm's weight gradient walk each
    column down 2048 rows, 4 KB apart: 200 ms where the column-lane kernel takes 2.)"""
    outer, rdims = kernel.outer_dims, kernel.reduce_dims
    if not outer:
        return False
    iv, rv = sympy.Symbol(outer[-1].var, integer=True), sympy.Symbol(rdims[-1].var, integer=True)
    score = 0
    for stmt in kernel.body:
        for i in (stmt.body if isinstance(stmt, Loop) else ()):
            if i.op not in (Op.LOAD, Op.STORE):
                continue
            b = layout.buffers[i.buffer]
            flat = sympy.expand(sum((e * st for e, st in zip(i.index, b.stride)), sympy.Integer(0)))
            score += int(flat.coeff(iv) == 1) - int(flat.coeff(rv) == 1 and iv in flat.free_symbols)
    return score > 0


def _open_block(out: list[str], pad: str, serial: list, decls: list[str], head: list[str]) -> tuple[str, str]:
    """Open a reduction loop's block in `out`: its counters' declarations (named for the loop), a brace, the
    loop's own values (`head`: named for what they compute, so they must stay in the block) and the serial
    r-loops (`serial`: (dim, lo, hi) each). Returns the block's indent and the innermost serial loop's."""
    out += [pad + d for d in decls]
    out.append(pad + "{")
    pad += "  "
    out += [pad + line for line in head]
    out += _serial_loops(pad, serial)
    return pad, pad + "  " * len(serial)


def _serial_loops(pad: str, serial) -> list[str]:
    """The opening lines of the serial loop nest over `serial` ((dim, lo, hi) each), each nested one deeper."""
    return [pad + "  " * j + f"for (int64_t {d.var} = {lo}; {d.var} < {hi}; ++{d.var}) {{"
            for j, (d, lo, hi) in enumerate(serial)]
