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

How a `Loop` block and each instruction print is `_statements.py`'s (`StatementPrinter`, the base class).

The plan decides the rest: dims arrive merged (`coalesce-dims`), and a `local` buffer (`stash-values`) is a
per-row stack array, declared inside the parallel loop. When lanes are i-points the kernel is printed with its
stashes recomputed (`recompute_locals`): a stash would be one row per lane. The parallel loop only forks when the
work is at least `EMBER_PAR_MIN` element-iterations (16384: on 2 cores a fork pays off from about 8K elements of
a sigmoid; cheap ops need more).

Under a max-autotune mode the same kernel is printed once per `Variant` (a parallel threshold, a tile size, a
vector width) and the fastest is measured on the first call (see `_autotune.py`).
"""

from __future__ import annotations

import sympy
from ember_lowering import (
    REDUCTIONS,
    Buffer,
    Instr,
    Kernel,
    Loop,
    Op,
    recompute_locals,
)
from ember_lowering.codegen import CannotPrint, PlanLayout, PrintedKernel

from ._build import vector_lanes
from ._cpp_rules import CTYPE, STORAGE_CTYPE
from ._exprs import ExprPrinter
from ._reductions import (
    Accumulator,
    inverse_count,
    outer_contiguous,
    welford_count,
)
from ._statements import StatementPrinter
from ._variants import DEFAULT, Variant, kernel_variants
from ._vector import VectorBody

CHUNK = 4096  # elements of the last i-dim per parallel work item of a pointwise kernel
BLOCK = 128  # i-points per parallel work item of an outer-contiguous reduction (its lanes)
_SIMD = "#pragma omp simd"
_PARALLEL = "#pragma omp parallel for schedule(static)"
_ERR = " reduction(|:ember_err)"


class KernelPrinter(StatementPrinter):
    """Prints one kernel; `CannotPrint` if it uses anything the printer does not handle."""

    def __init__(self, kernel: Kernel, layout: PlanLayout, name: str, variant: Variant = DEFAULT):
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
            self.outer_contiguous = outer_contiguous(plain, layout)
            if self.outer_contiguous:
                kernel, self.locals = plain, {}
        super().__init__(kernel, layout, name)
        self.ssa_nonneg: set[str] = set()
        # x / c by a constant stays a division: x * (1/c) can differ by an ulp from eager's x / c (hardswish's / 6)
        # a value rounded to float16/bfloat16 → what it rounds: a vector store converts that itself, rounding the
        # same way (`ember_vstore_bf16(ember_vround_bf16(x))` is `ember_vstore_bf16(x)`), so it stores it directly
        self.rounded_from = {i.out: i.srcs[0] for i in kernel.instrs()
                             if i.op is Op.CAST and i.dtype in ("float16", "bfloat16")}
        self.expr = ExprPrinter(self.names, lambda n: 0 if n in self.loop_vars or n in self.ssa_nonneg else
                                layout.lowers.get(n))
        self.uses_err = False
        self.accs: dict[str, Accumulator] = {}
        self.in_loop = False  # a Loop block is being printed
        self.loop_id = 0
        self.block = False  # an outer-contiguous kernel: SSA values at outer level are arrays over a block
        self.uniform: set[str] = set()  # its outer-level values the same for every lane: scalars (`uniform_values`)
        # block arrays and stashes declared so far: C name → element C type (vector moves are checked against it)
        self.stack: dict[str, str] = {}
        self.lane_ops: list[str] = []  # ops of explicit vector loops printed lane by lane, for the report
        self.split: str | None = None  # the r-dim a whole-tensor reduction's chunk runs a part of (lo, hi)

    # ------------------------------------------------------------------ entry

    def print(self) -> PrintedKernel:
        body = self._body()
        # in the order the loop IR first names them (not the printed text's: max-autotune's variants of a kernel
        # hoist loads differently, and each must take its parameters as the default does); kernels of one body
        # list theirs alike, so repeated layers print once (`_program.py`)
        first = {}
        for i in self.k.instrs():
            if i.buffer is not None and i.buffer not in self.locals:
                first.setdefault(self.pointer(i.buffer), len(first))
        roots = sorted(self.roots, key=lambda r: first.get(r, len(first)))  # pointers: a part's own (part_pointers)
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
        real = tuple(dict.fromkeys(self.layout.root(r) for r in roots))
        return PrintedKernel(self.name, real, frozenset(self.layout.root(r) for r in self.written()), text,
                             pointers=tuple(roots) if real != tuple(roots) else (),
                             simd=self._simd())

    def _simd(self) -> str:
        """How the kernel uses SIMD, for the vectorization report."""
        if not self.k.dims:
            return "scalar: one element"
        lane_ops = f", lane by lane: {', '.join(dict.fromkeys(self.lane_ops))}" if self.lane_ops else ""
        return f"explicit {self.lanes} lanes{lane_ops}"

    def variants(self, wide_vectors: bool) -> list[Variant]:
        """What max-autotune tries for this kernel, the default first (`kernel_variants`)."""
        return kernel_variants(self.k, self.outer_contiguous, wide_vectors)

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
        self.uniform = uniform_values(self.k)
        values = [o for stmt in self.k.body for i in (stmt.body if isinstance(stmt, Loop) else (stmt,))
                  for o in i.outs if (not isinstance(stmt, Loop) and o not in self.uniform) or i.op in REDUCTIONS]
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
        self.in_loop = True
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
        self.in_loop = False
        flush = [line for a in accs for line in a.flush(f"ember_steps{k}")]
        if flush:
            out += [inner + f"++ember_steps{k};", *[inner + line for line in flush]]
        out += [pad + "  " * j + "}" for j in reversed(range(len(rdims)))]
        results = [f"ember_b_{o}[ember_j] = {expr};" for a in accs for o, expr in a.results("ember_j")]
        for a in accs:
            for o in a.i.outs:
                self.dtypes[o] = a.i.dtype
        return out + (self._block_loop(results, pad) if results else [])


def uniform_values(kernel: Kernel) -> set[str]:
    """Values of an outer-contiguous kernel's statements outside loops that do not depend on its last i-dim, so are
    the same for every lane of a block: constants, indices and loads at indices of the outer i-dims only, and what
    is computed from those alone. They print once per block as scalars rather than as block arrays (a `cat`'s
    masks over an outer i-dim then are plain booleans, not arrays the vector loop reads a lane at a time)."""
    varying = {kernel.outer_dims[-1].var} | {o for i in kernel.instrs() for o in i.outs}  # SSA values unless in out
    out: set[str] = set()
    for s in kernel.body:
        if isinstance(s, Loop) or s.op in REDUCTIONS or s.op is Op.STORE or not s.outs:
            continue
        names = {str(x) for e in s.index for x in getattr(e, "free_symbols", ())}
        if not (names & varying) - out and all(x in out for x in s.srcs) and \
                (s.srcs or s.op in (Op.CONST, Op.INDEX, Op.LOAD)):
            out.update(s.outs)
    return out
