"""Pass `pad-gemms` (CUDA graphs): a matrix product whose rows are not a multiple of 16 bytes long runs on padded
operands.

cuBLAS picks its fast kernels (sm90 tensor-core GEMMs) only when the leading dimensions of the operands and the
result are multiples of 16 bytes: 8 bf16/fp16 elements, 4 float32. GPT-2's LM head (`mm` with N = 50257 in bf16)
ran a `cutlass_75 s1688gemm` kernel instead: 3.36 ms of ember's 4.43 ms of GPU time, on an H200. Here

    c = mm(a, b)                                  # a: [M, K], b: [K, N], K or N not aligned

becomes

    a1 = constant_pad_nd(a, [0, Kp - K])          # zero columns: the added products are 0
    b1 = constant_pad_nd(b, [0, Np - N, 0, Kp - K])
    c1 = mm(a1, b1)                               # [M, Np]
    c  = clone(slice(c1, 1, 0, N), memory_format=contiguous_format)

so `c` keeps its name, shape and contiguous layout, and nothing after it changes. The copy is a pointwise kernel
that fusion folds into `c`'s readers; a padded weight of a frozen graph is padded once (`fold-constants`). `addmm`
pads a bias of N elements too; `bmm` pads its last two dims. Only static shapes, float16, bfloat16 and float32.

Whether padding pays is measured, once per GEMM shape, dtype and GPU (the padded product with its copies against
the plain one, on random operands), and the choice kept in ember's disk cache (`gemm_padding`, through
ember-lowering's `Tuner`). Where no GPU can measure (compiling for CUDA on a machine without one), a heuristic
decides: pad when the product is large (`MIN_MACS`) and the misaligned size at least `MIN_SIZE`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from ember_core import Graph, Node, Ref, Value, contiguous_stride, fresh_name, graph_device, to_dtype
from ember_lowering.codegen import Tuner

log = logging.getLogger("ember.kernels")

PASS_ID = "pad-gemms"
ALIGN_BYTES = 16
GEMMS = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default")
PADDED_DTYPES = ("float16", "bfloat16", "float32")
MIN_MACS = 1 << 27  # multiply-adds from which the heuristic pads (GPT-2's LM head: 8*512*768*50257 = 1.6e11)
MIN_SIZE = 256  # ... and the misaligned size: a narrow GEMM gains little from a tensor-core tile
TUNER = Tuner("gemm_padding", PASS_ID, machine=("gpu",))


@dataclass(frozen=True)
class Gemm:
    """One product's sizes: `batch` (bmm; else 0), M, K, N, its dtype and device, and the padded K and N."""

    op: str
    batch: int
    m: int
    k: int
    n: int
    dtype: str
    device: str

    @property
    def align(self) -> int:
        return ALIGN_BYTES // to_dtype(self.dtype).itemsize

    @property
    def kp(self) -> int:
        return -(-self.k // self.align) * self.align

    @property
    def np(self) -> int:
        return -(-self.n // self.align) * self.align

    @property
    def macs(self) -> int:
        return max(self.batch, 1) * self.m * self.k * self.n


Decision = Callable[[Gemm], bool]


def heuristic(g: Gemm) -> bool:
    """Padding pays for large products (see the module's docstring)."""
    misaligned = [size for size, padded in ((g.k, g.kp), (g.n, g.np)) if size != padded]
    return g.macs >= MIN_MACS and max(misaligned, default=0) >= MIN_SIZE


def measured(g: Gemm) -> bool:
    """The faster of plain and padded, timed on this GPU once and kept on disk; the heuristic without CUDA."""
    if not torch.cuda.is_available() or torch.device(g.device).type != "cuda":
        return heuristic(g)
    device = torch.device(g.device)
    key = hashlib.sha256(repr((g, torch.cuda.get_device_name(device), torch.__version__)).encode()).hexdigest()[:40]
    plain, padded, operands = _products(g, device)
    candidates = [(1,), (0,)] if heuristic(g) else [(0,), (1,)]  # the heuristic's choice first: it wins ties
    choice = TUNER.choose(key, f"{g.op} {g.m}x{g.k}x{g.n} {g.dtype}", candidates,
                          lambda c: padded() if c == (1,) else plain(), [], operands)
    return choice == (1,)


def _products(g: Gemm, device: torch.device):
    """The plain product and the padded one (pads and the copy of the result included) on random operands, and
    the operands (the timer synchronizes on them)."""
    dtype = to_dtype(g.dtype)
    batch = (g.batch,) if g.batch else ()
    a = torch.randn(*batch, g.m, g.k, device=device, dtype=dtype)
    b = torch.randn(*batch, g.k, g.n, device=device, dtype=dtype)
    mm = torch.bmm if g.batch else torch.mm

    def padded():
        a1 = torch.nn.functional.pad(a, (0, g.kp - g.k))
        b1 = torch.nn.functional.pad(b, (0, g.np - g.n, 0, g.kp - g.k))
        return mm(a1, b1)[..., : g.n].contiguous()

    return (lambda: mm(a, b)), padded, [a, b]


class PadGemms:
    """The pass; `decide(gemm)` says whether to pad (default: `measured`), `device_types` which graphs it
    considers (a test runs it on the CPU's)."""

    id = PASS_ID

    def __init__(self, decide: Decision | None = None, device_types: tuple[str, ...] = ("cuda",)):
        self.decide = decide or measured
        self.device_types = device_types

    def run(self, graph: Graph) -> Graph:
        device = graph_device(graph)
        if torch.device(device).type not in self.device_types:
            return graph
        values, nodes, taken, padded = dict(graph.values), [], set(), 0
        for node in graph.nodes:
            gemm = _gemm(graph, node, device)
            if gemm is None or (gemm.kp == gemm.k and gemm.np == gemm.n) or not self.decide(gemm):
                nodes.append(node)
                continue
            nodes += _padded(graph, node, gemm, values, taken)
            padded += 1
            log.debug("pad-gemms: %s %s: K %d -> %d, N %d -> %d", node.outputs[0], gemm.op, gemm.k, gemm.kp,
                      gemm.n, gemm.np)
        return graph.replace(nodes=tuple(nodes), values=values) if padded else graph


def _static(v: Value | None) -> bool:
    return v is not None and v.type == "tensor" and all(isinstance(d, int) for d in (*v.shape, *v.stride))


def _gemm(graph: Graph, node: Node, device: str) -> Gemm | None:
    """The product `node` computes, if it is one this pass can pad."""
    if node.op not in GEMMS or node.kwargs or len(node.outputs) != 1:
        return None
    operands = node.args[1:3] if node.op == "aten.addmm.default" else node.args[:2]
    if len(node.args) != (3 if node.op == "aten.addmm.default" else 2) or not all(
            isinstance(a, Ref) and a.name in graph.values for a in operands):
        return None
    a, b, out = graph.values[operands[0].name], graph.values[operands[1].name], graph.values.get(node.outputs[0])
    if not (_static(a) and _static(b) and _static(out)) or a.dtype not in PADDED_DTYPES or \
            out.stride != contiguous_stride(out.shape):
        return None
    if node.op == "aten.addmm.default" and not _paddable_bias(graph, node.args[0], b.shape[-1]):
        return None
    batch = a.shape[0] if node.op == "aten.bmm.default" else 0
    return Gemm(node.op, batch, a.shape[-2], a.shape[-1], b.shape[-1], a.dtype, device)


def _paddable_bias(graph: Graph, bias: object, n: int) -> bool:
    v = graph.values.get(bias.name) if isinstance(bias, Ref) else None
    return _static(v) and len(v.shape) in (1, 2) and v.shape[-1] in (1, n)



def _padded(graph: Graph, node: Node, g: Gemm, values: dict[str, Value], taken: set[str]) -> list[Node]:
    """The nodes that replace `node`: pads, the product on them, and (N padded) the copy of its first N columns
    under the product's old name."""
    out = node.outputs[0]
    meta, old = node.meta, values[out]
    new: list[Node] = []

    def add(base: str, op: str, args: tuple, shape: tuple[int, ...], like: Value, stride=None, of=None) -> Ref:
        name = fresh_name(graph, base, taken)
        values[name] = like.replace(shape=shape, stride=stride or contiguous_stride(shape), base=of, storage_offset=0)
        new.append(Node((name,), op, args, {}, meta))
        return Ref(name)

    def pad(ref: Ref, last: int, second: int) -> Ref:
        if not last and not second:
            return ref
        v = values[ref.name]
        shape = (*v.shape[:-2], v.shape[-2] + second, v.shape[-1] + last) if second else (*v.shape[:-1],
                                                                                             v.shape[-1] + last)
        widths = (0, last, 0, second) if second else (0, last)
        return add(f"{ref.name}_padded", "aten.constant_pad_nd.default", (ref, widths, 0.0), shape, v)

    args = list(node.args)
    at = 1 if g.op == "aten.addmm.default" else 0
    args[at] = pad(args[at], g.kp - g.k, 0)
    args[at + 1] = pad(args[at + 1], g.np - g.n, g.kp - g.k)
    if at and graph.values[args[0].name].shape[-1] == g.n:
        args[0] = pad(args[0], g.np - g.n, 0)
    if g.np == g.n:
        return [*new, node.replace(args=tuple(args))]
    wide = (*old.shape[:-1], g.np)
    product = add(f"{out}_padded", g.op, tuple(args), wide, old)
    cut = add(f"{out}_cut", "aten.slice.Tensor", (product, len(wide) - 1, 0, g.n), old.shape, old,
              contiguous_stride(wide), of=product.name)
    new.append(Node((out,), "aten.clone.default", (cut,), {"memory_format": torch.contiguous_format}, meta))
    return new
