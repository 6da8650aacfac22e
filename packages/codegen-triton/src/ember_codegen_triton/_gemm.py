"""Matmul templates under a max-autotune mode: a GEMM and the pointwise kernel after it as one Triton kernel.

An extern `mm`, `addmm` or `bmm` whose result only the next kernel reads, and reads element for element (a bias,
an activation, a cast, a residual add: the GEMM's *epilogue*), can run as one kernel. Each program accumulates a
`[BLOCK_M, BLOCK_N]` tile of the product in float32 with `tl.dot` over the K dimension, rounds it to the product's
dtype as the extern's result would be, and runs the epilogue's body on the tile where the epilogue loaded the
product: the product never goes to memory, and one launch replaces two.

    extern mm = aten.mm.default(x, w)                     @triton.jit
    kernel pointwise_64x48[i0 < 64, i1 < 48]:     →       def ember_k1_add_pointwise_64x48_mm(b_x, b_w, b_b, ...):
      t0: f32 = load mm[i0, i1]                               ...tiles of x and w, acc += tl.dot(a, b)...
      t1: f32 = load b[i1]                                    i0 = rm[:, None]
      ...                                                     i1 = rn[None, :]
                                                              t0 = acc
                                                              t1 = tl.load(b_b + ...)

A template is kept only where it is faster: on the first call `TunedGemm` (`_autotune.py`) times the extern call
plus the epilogue kernel, and the template in each configuration (`CONFIGS`, cut to the problem's size), and
stores the fastest on disk with the other tuning choices. The extern and its epilogue stay in the program: the
wrapper runs them when the measured choice is theirs (see `TritonWrapperWriter.call_extern`).

`find_templates` says which extern calls have one. What it requires is what makes the rewrite exact:
- the op is `mm`, `bmm`, or `addmm` with beta and alpha 1; operands of one float dtype that `tl.dot` takes
  (float32, float16, bfloat16) and a product of the same dtype;
- the product is a row-major buffer of its own, and the first kernel after the call is pointwise, reads the
  product only by loads whose element is the kernel's own point in row-major order, over as many points as the
  product has, and writes none of the GEMM's operands. Where a later step or the graph's outputs also read the
  product (training saves it for the backward), the template stores it as well (`stores_product`);
- float32 products accumulate as torch's CUDA matmul does by default: `input_precision="ieee"`, or `"tf32"` when
  `torch.backends.cuda.matmul.allow_tf32` is set at compile time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import sympy
import torch
from ember_core import Ref
from ember_lowering import Extern, Kernel, Loop, Op, Ranges, flat_index, sym
from ember_lowering.codegen import CannotPrint, InterpretedKernel, PlanLayout, Program, Segment

from ._exprs import TritonIndexPrinter
from ._kernel_printer import TritonKernelPrinter, unflatten
from ._rules import cast

log = logging.getLogger("ember.kernels")

GEMM_OPS = {"aten.mm.default": "mm", "aten.addmm.default": "addmm", "aten.bmm.default": "bmm"}
DOT_DTYPES = frozenset({"float32", "float16", "bfloat16"})
Config = tuple[int, int, int, int, int]  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
# Tiles that do well on Hopper and Ampere for 16-bit and float32 operands; `configs` cuts them to the problem
CONFIGS: tuple[Config, ...] = (
    (128, 128, 32, 8, 3), (128, 128, 64, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
    (64, 64, 32, 4, 4), (64, 32, 32, 4, 5), (32, 64, 32, 4, 5), (32, 32, 32, 4, 2), (16, 64, 64, 4, 3),
)
MIN_BLOCK = 16  # tl.dot's smallest tile side
GROUP_M = 8  # tile rows a group of programs walks before moving along N (so that they share tiles of B in L2)


@dataclass(frozen=True)
class GemmTemplate:
    """One template kernel: its name, roots (parameters, in order), the roots it writes, its text; the extern call
    it replaces (program step `extern`), the kernel after it (`epilogue`, the first of the next segment) and the
    product (`product`, the extern's result; `stores_product`: others read it, so the template stores it too);
    `sizes` (batch, M, N, K), and the configurations worth trying."""

    name: str
    roots: tuple[str, ...]
    writes: frozenset[str]
    text: str
    extern: int
    epilogue: str
    product: str
    stores_product: bool
    sizes: tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]
    configs: tuple[Config, ...]


def find_templates(program: Program, interpreting: bool = False) -> dict[int, GemmTemplate]:
    """Program step index of an extern GEMM → its template with the kernel after it, for each one that has one;
    `interpreting`: for Triton's interpreter (see `TemplatePrinter`)."""
    out = {}
    for index, step in enumerate(program.steps):
        if not isinstance(step, Extern) or step.op not in GEMM_OPS:
            continue
        why = unfusable(program, index)
        if why:
            log.info("graph %r: %s (step %d) keeps its extern call under max-autotune: %s", program.plan.name,
                     step.op, index, why)
            continue
        epilogue = program.steps[index + 1].kernels[0]  # type: ignore[union-attr]
        try:
            out[index] = TemplatePrinter(epilogue.ir, program.layout, f"{epilogue.name}_{GEMM_OPS[step.op]}",
                                         step, index, epilogue.name, read_elsewhere(program, index),
                                         interpreting).print()
        except CannotPrint as e:
            log.info("graph %r: no template for %s (step %d): %s", program.plan.name, step.op, index, e)
            continue
        log.info("graph %r: %s (step %d) and kernel %s may run as template %s (measured on the first call)",
                 program.plan.name, step.op, index, epilogue.name, out[index].name)
    return out


def unfusable(program: Program, index: int) -> str:
    """Why the extern GEMM at program step `index` cannot run as one kernel with the kernel after it ("" if it can)."""
    ext, layout = program.steps[index], program.layout
    assert isinstance(ext, Extern)
    op = GEMM_OPS[ext.op]
    if len(ext.args) != (3 if op == "addmm" else 2) or not all(isinstance(a, Ref) for a in ext.args):
        return "its arguments are not buffers"
    if set(ext.kwargs) - {"beta", "alpha"} or any(v != 1 for v in ext.kwargs.values()):
        return f"keywords {ext.kwargs}"
    if len(ext.outs) != 1 or ext.outs[0] not in layout.buffers:
        return "its result is not one buffer"
    product = layout.buffers[ext.outs[0]]
    dtypes = {layout.buffers[a.name].dtype for a in ext.args} | {product.dtype}
    if len(dtypes) != 1 or product.dtype not in DOT_DTYPES:
        return f"dtypes {sorted(dtypes)} (tl.dot takes one of {sorted(DOT_DTYPES)})"
    if product.kind not in ("temp", "output") or product.base is not None or \
            not _row_major(product.shape, product.stride):
        return "its result is not a row-major buffer of its own"
    follower = program.steps[index + 1] if index + 1 < len(program.steps) else None
    if not isinstance(follower, Segment) or follower.kernels[0].ir is None:
        return "no printed kernel follows it"
    epilogue = follower.kernels[0]
    k = epilogue.ir
    if k.reduce_dims or any(isinstance(s, Loop) for s in k.body) or epilogue.checks:
        return f"kernel {epilogue.name} is not pointwise"
    mine = {b for b in layout.buffers if layout.root(b) == product.name}
    point = _row_major_point(k)
    if sympy.expand(sympy.Mul(*[d.size for d in k.dims]) - sympy.Mul(*product.shape)) != 0:
        return f"kernel {epilogue.name} does not run over the product's elements"
    operands = {layout.root(a.name) for a in ext.args}
    if not any(i.buffer in mine for i in k.instrs()):
        return f"kernel {epilogue.name} does not read the product"
    ranges = Ranges({d.var: d.size for d in k.dims}, layout.lowers)
    for i in k.instrs():
        if i.buffer in mine:
            if i.op is not Op.LOAD or i.srcs:
                return f"kernel {epilogue.name} stores to or masks its loads of the product"
            b = layout.buffers[i.buffer]
            if sympy.expand(flat_index(i.index, b.stride, layout.rel_offset(i.buffer), ranges) - point) != 0:
                return f"kernel {epilogue.name} reads the product other than element for element"
        elif i.op is Op.STORE and layout.root(i.buffer) in operands:
            return f"kernel {epilogue.name} writes an operand of the GEMM"
    return ""


def _row_major(shape, stride) -> bool:
    expected = sympy.Integer(1)
    for size, st in zip(reversed(shape), reversed(stride)):
        if sympy.expand(size - 1) != 0 and sympy.expand(st - expected) != 0:
            return False
        expected = expected * size
    return True


def _row_major_point(k: Kernel) -> sympy.Expr:
    """The row-major flat index of the kernel's point over its dims."""
    flat, after = sympy.Integer(0), sympy.Integer(1)
    for d in reversed(k.dims):
        flat, after = flat + sym(d.var) * after, after * d.size
    return sympy.expand(flat)


def read_elsewhere(program: Program, index: int) -> bool:
    """Do the graph's outputs or any step but the extern at `index` and the kernel after it read its result?"""
    layout = program.layout
    product = program.steps[index].outs[0]  # type: ignore[union-attr]
    mine = {b for b in layout.buffers if layout.root(b) == product}
    if any(isinstance(o, str) and o in mine for o in program.plan.outputs):
        return True
    for j, step in enumerate(program.steps):
        if j == index:
            continue
        if isinstance(step, Segment):
            kernels = step.kernels[1:] if j == index + 1 else step.kernels
            names = {r for kern in kernels for r in kern.roots}
        elif isinstance(step, InterpretedKernel):
            names = {i.buffer for i in step.kernel.instrs() if i.buffer}
        else:
            names = {a.name for a in _refs((*step.args, *step.kwargs.values()))} | set(step.outs)
        if any(n in mine or (n in layout.buffers and layout.root(n) in mine) for n in names):
            return True
    return False


def _refs(args):
    for a in args:
        if isinstance(a, Ref):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from _refs(a)


def configs(sizes, allowed: tuple[Config, ...] | None = None) -> tuple[Config, ...]:
    """The configurations worth trying for a problem of `sizes` (batch, M, N, K): those `allowed` (default
    `CONFIGS`) with blocks no larger than the next power of two of their side (at least `MIN_BLOCK`), each once."""
    allowed = CONFIGS if allowed is None else allowed
    _, m, n, k = sizes
    caps = [_cap(s) for s in (m, n, k)]
    out = [(min(bm, caps[0]), min(bn, caps[1]), min(bk, caps[2]), w, st) for bm, bn, bk, w, st in allowed]
    return tuple(dict.fromkeys(out))


def _cap(size: sympy.Expr) -> int:
    if not size.is_Integer:
        return 1 << 30
    return max(MIN_BLOCK, 1 << max(0, (int(size) - 1).bit_length()))


class TemplatePrinter(TritonKernelPrinter):
    """Prints the template of extern `ext` and kernel `epilogue`: the GEMM's tile loop, then the epilogue's body on
    `[BLOCK_M, BLOCK_N]` tiles, its loads of the product replaced by the accumulator.

    For Triton's interpreter (`interpreting`), bfloat16 tiles are widened to float32 before `tl.dot`: the
    interpreter keeps bfloat16 as 16-bit integers and multiplies the bits (values near 1e10; measured on Triton 3.6
    and 3.9, triton-lang/triton#11584). The result is the same: a product of two bfloat16 values is exact in
    float32, which a GPU's tensor cores accumulate in."""

    def __init__(self, epilogue: Kernel, layout: PlanLayout, name: str, ext: Extern, index: int, epilogue_name: str,
                 stores_product: bool = False, interpreting: bool = False):
        super().__init__(epilogue, layout, name)
        self.ext, self.index, self.epilogue_name = ext, index, epilogue_name
        self.stores_product = stores_product
        self.interpreting = interpreting
        self.product = ext.outs[0]
        self.mine = {b for b in layout.buffers if layout.root(b) == self.product}
        *self.a_b, = (a.name for a in ext.args[-2:])
        self.bias = ext.args[0].name if GEMM_OPS[ext.op] == "addmm" else None
        a, b = (layout.buffers[n] for n in self.a_b)
        self.batched = len(a.shape) == 3
        batch = a.shape[0] if self.batched else sympy.Integer(1)
        self.sizes = (batch, a.shape[-2], b.shape[-1], a.shape[-1])

    def _shape(self, inside: bool) -> str:
        return "[BLOCK_M, BLOCK_N]"

    def print(self) -> GemmTemplate:  # type: ignore[override]
        body = self._gemm() + self._point()
        for stmt in self.k.body:
            body += self._instr(stmt, inside=False)  # type: ignore[arg-type] - pointwise: instructions only
        roots = list(self.roots)
        params = [self.layout.local[r] for r in roots] + [self.layout.sym_local[s] for s in self.layout.symbols]
        params += ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr"]
        origins = f"  # {GEMM_OPS[self.ext.op]} and{self.origins_comment('').removeprefix('  ')}"
        text = "\n".join(["@triton.jit", f"def {self.name}({', '.join(params)}):{origins}",
                          *["    " + line for line in body]])
        if self.checks:
            raise CannotPrint("its epilogue checks indices")
        return GemmTemplate(self.name, tuple(roots), self.written(), text, self.index, self.epilogue_name,
                            self.product, self.stores_product, self.sizes, configs(self.sizes))

    def _gemm(self) -> list[str]:
        """The tile this program computes, and the loop over K that accumulates it in `acc`."""
        _, m, n, k = (self.expr(s) for s in self.sizes)
        gm, gn, gk, gb = sym("gm"), sym("gn"), sym("gk"), sym("gb")
        a, b = self.a_b
        lines = [
            "pid = tl.program_id(0)",
            f"grid_m = tl.cdiv({m}, BLOCK_M)",
            f"grid_n = tl.cdiv({n}, BLOCK_N)",
            f"group = {GROUP_M} * grid_n",
            f"first_m = (pid // group) * {GROUP_M}",
            f"rows = tl.minimum(grid_m - first_m, {GROUP_M})",
            "pid_m = first_m + (pid % group) % rows",
            "pid_n = (pid % group) // rows",
            "rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)",
            "rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)",
        ]
        if self.batched:
            lines.append("rb = tl.program_id(1).to(tl.int64)")
        lines += ["acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)",
                  f"for k0 in range(0, {k}, BLOCK_K):",
                  "    rk = k0 + tl.arange(0, BLOCK_K).to(tl.int64)"]
        a_at = self._operand(a, (gb, gm, gk), {"gm": "rm[:, None]", "gk": "rk[None, :]"})
        b_at = self._operand(b, (gb, gk, gn), {"gk": "rk[:, None]", "gn": "rn[None, :]"})
        widen = ".to(tl.float32)" if self.interpreting and self.dtype == "bfloat16" else ""
        lines += [f"    a = tl.load({a_at}, mask=(rm[:, None] < {m}) & (rk[None, :] < {k}), other=0.0){widen}",
                  f"    b = tl.load({b_at}, mask=(rk[:, None] < {k}) & (rn[None, :] < {n}), other=0.0){widen}",
                  f"    acc += tl.dot(a, b{self._precision()})"]
        if self.bias is not None:  # addmm: beta * bias + alpha * product with both 1, in float32 as cuBLAS adds it
            bias = self.layout.buffers[self.bias]
            index = [sympy.Integer(0) if sympy.expand(s - 1) == 0 else g
                     for s, g in zip(bias.shape, (gm, gn)[2 - len(bias.shape):])]
            at = self._address_of(self.bias, index, {"gm": "rm[:, None]", "gn": "rn[None, :]"})
            lines.append(f"acc += tl.load({at}, mask=(rm[:, None] < {m}) & (rn[None, :] < {n}), "
                         f"other=0.0).to(tl.float32)")
        return lines

    def _operand(self, name: str, point: tuple[sympy.Symbol, ...], names: dict[str, str]) -> str:
        index = point if self.batched else point[1:]
        return self._address_of(name, list(index), {"gb": "rb", **names})

    def _address_of(self, name: str, index: list, names: dict[str, str], written: bool = False) -> str:
        """The pointer tensor of buffer `name` at `index` (over the template's own symbols, spelled by `names`)."""
        b = self.layout.buffers[name]
        flat = flat_index(index, b.stride, self.layout.rel_offset(name))
        spell = dict(self.names) | names
        printer = TritonIndexPrinter(spell, lambda s: 0 if s in names else self.layout.lowers.get(s))
        root = self.write_root(name) if written else self.read_root(name)
        return f"{self.layout.local[root]} + ({printer(flat)})"

    @property
    def dtype(self) -> str:
        return self.layout.buffers[self.product].dtype

    def _precision(self) -> str:
        if self.dtype == "bfloat16" and self.interpreting:
            return ', input_precision="ieee"'
        if self.dtype != "float32":
            return ""
        return ', input_precision="tf32"' if torch.backends.cuda.matmul.allow_tf32 else ', input_precision="ieee"'

    def _point(self) -> list[str]:
        """The epilogue's dims at each element of the tile: the product's (batch, row, column) where its dims are
        those, else unflattened from the element's row-major index."""
        batch, m, n, _ = self.sizes
        dims = self.k.dims
        if self.batched:
            mine = (batch, m, n)
            spelled = ["rb", "rm[:, None]", "rn[None, :]"]
        else:
            mine, spelled = (m, n), ["rm[:, None]", "rn[None, :]"]
        lines = [f"xmask = (rm[:, None] < {self.expr(m)}) & (rn[None, :] < {self.expr(n)})"]
        if self.stores_product:  # for the steps after the epilogue that read it too
            index = [sym("gb"), sym("gm"), sym("gn")][0 if self.batched else 1:]
            at = self._address_of(self.product, index, {"gb": "rb", "gm": "rm[:, None]", "gn": "rn[None, :]"},
                                  written=True)
            lines.append(f"tl.store({at}, {cast('acc', 'float32', self.dtype)}, mask=xmask)")
        if len(dims) == len(mine) and all(sympy.expand(d.size - s) == 0 for d, s in zip(dims, mine)):
            return lines + [f"{d.var} = {s}" for d, s in zip(dims, spelled)]
        flat = f"rm[:, None] * ({self.expr(n)}) + rn[None, :]"
        if self.batched:
            flat = f"rb * ({self.expr(m * n)}) + {flat}"
        return lines + [f"xindex = {flat}", *unflatten("xindex", dims, self.expr)]

    def _load(self, i, inside: bool) -> list[str]:
        if i.buffer in self.mine:  # the product, as the extern would have stored it
            return [f"{i.out} = {cast('acc', 'float32', self.layout.buffers[self.product].dtype)}"]
        return super()._load(i, inside)


__all__ = ["CONFIGS", "GemmTemplate", "configs", "find_templates", "unfusable"]
