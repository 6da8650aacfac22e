"""Pass `prepack-weights`: CPU convolutions and linear layers with constant weights call oneDNN's fused ops.

- `aten.convolution` (2-d, not transposed; float32, or bfloat16 where torch runs oneDNN's bf16 kernels) →
  `mkldnn._convolution_pointwise` with the weight reordered once into oneDNN's blocked layout
  (`mkldnn._reorder_convolution_weight`, for the traced input size);
- `aten.addmm` / `aten.mm` with a constant `(in, out)` weight (the same dtypes, 2-d input) →
  `mkldnn._linear_pointwise` with the `(out, in)` weight reordered once (`mkldnn._reorder_linear_weight`, for the
  traced batch size);
- an activation that alone reads the result (relu, gelu, silu, hardswish, hardsigmoid, sigmoid, tanh, hardtanh,
  leaky_relu; as one node or as capture decomposes it, `_epilogues.py`) is fused into the op's epilogue.

Both ops have meta kernels, so the new nodes run under FakeTensorMode, which gives their outputs' layout (oneDNN's
convolution writes channels-last). Lowering calls them as extern ATen kernels, like `aten.convolution`. The nodes
after them take the layouts ATen gives from there (`follow_layouts.py`), so the next convolution gets channels-last
input, which oneDNN reads without a reorder; what the graph returns keeps its declared layout (a packed op's result
the graph returns is copied back to eager's, so `out.view(...)` works as in eager). The new layouts are safe
for the nodes after: lowering's views are index maps over logical indices, whatever the strides. Left alone:
symbolic sizes, other dtypes and devices, ops where ATen's own is faster (`conv_worth_packing`,
`linear_worth_packing`: small dense convolutions at one thread, small linear layers), and every node when oneDNN is
not available. `benchmarks/freezing_ops.py` measures what each rewrite gains."""

from __future__ import annotations

import math
from typing import Any

import torch
from ember_core import (
    Graph,
    Node,
    Ref,
    copy_to_layout,
    dtype_name,
    fresh_name,
    graph_device,
    memory_format_of,
    prune_values,
    rename_reads,
    resolve_op,
    to_dtype,
)
from torch._subclasses.fake_tensor import FakeTensorMode

from ._edit import add_constant, constant_of, output_names, readers
from ._epilogues import Epilogue, match_epilogue
from .follow_layouts import VIEWS, follow_layouts

PASS_ID = "prepack-weights"
CONVOLUTION = "aten.convolution.default"
CONV_POINTWISE = "mkldnn._convolution_pointwise.default"
LINEAR_POINTWISE = "mkldnn._linear_pointwise.default"
# Multiply-adds per call below which ATen's own op is faster: oneDNN's fused ops cost 10-20 us more per call
# (`benchmarks/freezing_ops.py`; one thread: a 3->8 channel 3x3 convolution on 32x32 takes 19 us in eager, 42 us
# fused; a 4x16x64 linear 3 us against 15 us; they break even near these sizes).
MIN_MACS = {CONVOLUTION: 2_000_000, "aten.addmm.default": 4_000_000, "aten.mm.default": 4_000_000}
# A linear layer on two rows or more with a weight of this many elements is faster packed, whatever its
# multiply-adds: its time is reading the weight, and addmm reads the transposed weight slowly (mobilenetv3's
# classifier, 2x1024 by 1024x1000: addmm 145-234 us, the packed op 56-92; at one row addmm's GEMV wins).
MIN_PACKED_WEIGHT = 256 * 1024


def conv_worth_packing(macs: int, depthwise: bool) -> bool:
    """Is a convolution of `macs` multiply-adds faster as oneDNN's fused op than as `aten.convolution`, at the
    thread count the model is frozen at? Below `MIN_MACS` ATen's own direct kernel wins at one thread (mobilenetv3's
    squeeze-excite 1x1 convolutions: 5-20 us against 25-55 us). From two threads on ATen hands such a convolution
    to oneDNN unpacked, which costs 60-130 us where the packed op takes 30-60; and a depthwise convolution is faster
    packed at any thread count (10-30 us less each). `benchmarks/conv_choices.py` measures both per convolution."""
    return depthwise or torch.get_num_threads() > 1 or macs >= MIN_MACS[CONVOLUTION]


def linear_worth_packing(op: str, rows: int, weight: torch.Tensor) -> bool:
    return rows * weight.numel() >= MIN_MACS[op] or (rows >= 2 and weight.numel() >= MIN_PACKED_WEIGHT)


def available(graph: Graph) -> bool:
    return torch.backends.mkldnn.is_available() and torch.device(graph_device(graph)).type == "cpu"


def packable_dtypes() -> tuple[torch.dtype, ...]:
    """Weight dtypes the fused ops take: float32, and bfloat16 where torch runs oneDNN's bf16 kernels on this CPU
    (AVX-512 BW/VL/DQ: natively with AVX-512 BF16 or AMX, emulated on older AVX-512), as eager's own bf16
    convolutions and matmuls do there; elsewhere ATen's ops stay."""
    bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return (torch.float32, torch.bfloat16) if bf16 else (torch.float32,)


def _static_float(graph: Graph, arg: Any, dims: int, dtype: torch.dtype) -> bool:
    v = graph.values.get(arg.name) if isinstance(arg, Ref) else None
    return (v is not None and v.type == "tensor" and v.dtype == dtype_name(dtype) and len(v.shape) == dims
            and all(isinstance(d, int) for d in (*v.shape, *v.stride)))


def _ints(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(i, int) for i in x)


def _conv_args(graph: Graph, node: Node, taken: set[str], constants: dict) -> list | None:
    """`_convolution_pointwise`'s arguments up to `groups`, with the packed weight stored; or None."""
    if node.kwargs or len(node.args) != 9:
        return None
    x, w_ref, b_ref, stride, padding, dilation, transposed, _, groups = node.args
    w, b = constant_of(graph, w_ref), constant_of(graph, b_ref)
    if w is None or w.dtype not in packable_dtypes() or w.dim() != 4 or w.is_mkldnn or transposed is not False:
        return None
    if (b_ref is not None and (b is None or b.dtype != w.dtype)) or not _static_float(graph, x, 4, w.dtype):
        return None
    if not (_ints(stride) and _ints(padding) and _ints(dilation) and isinstance(groups, int)):
        return None
    shape = list(graph.values[x.name].shape)
    out = graph.values[node.outputs[0]].shape
    if not all(isinstance(d, int) for d in out) or not conv_worth_packing(math.prod(out) * w[0].numel(),
                                                                           depthwise=groups > 1 and w.shape[1] == 1):
        return None
    packed = torch.ops.mkldnn._reorder_convolution_weight(w.contiguous(), list(padding), list(stride), list(dilation),
                                                         groups, shape)
    name = fresh_name(graph, f"{w_ref.name}_packed", taken)
    return [x, add_constant(constants, name, packed), b_ref, tuple(padding), tuple(stride), tuple(dilation), groups]


def _linear_args(graph: Graph, node: Node, taken: set[str], constants: dict) -> list | None:
    """`_linear_pointwise`'s arguments up to the bias, with the `(out, in)` weight packed and stored; or None."""
    args = list(node.args)
    if node.kwargs or len(args) != (3 if node.op == "aten.addmm.default" else 2):
        return None
    b_ref, x, w_ref = args if len(args) == 3 else (None, *args)
    w, b = constant_of(graph, w_ref), constant_of(graph, b_ref)
    if w is None or w.dtype not in packable_dtypes() or w.dim() != 2 or not _static_float(graph, x, 2, w.dtype):
        return None
    if b_ref is not None and (b is None or b.dim() != 1 or b.dtype != w.dtype or b.shape[0] != w.shape[1]):
        return None
    batch = graph.values[x.name].shape[0]
    if not linear_worth_packing(node.op, batch, w):
        return None
    packed = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), batch)
    return [x, add_constant(constants, fresh_name(graph, f"{w_ref.name}_packed", taken), packed), b_ref]


def _fake_args(graph: Graph, args: Any, constants: dict) -> list:
    """Fake tensors for the node's arguments, laid out as the graph declares (constants as their tensors)."""
    def fake(a: Any) -> Any:
        if isinstance(a, tuple):
            return [fake(x) for x in a]
        if not isinstance(a, Ref):
            return a
        if a.name in constants:
            t = constants[a.name].tensor
            return torch.empty(tuple(t.shape), dtype=t.dtype)
        v = graph.values[a.name]
        return torch.empty_strided(v.shape, v.stride, dtype=to_dtype(v.dtype)) if v.type == "tensor" else a
    return [fake(a) for a in args]


def _layout(op: str, graph: Graph, args: list, constants: dict) -> tuple[int, ...]:
    """The strides of the op's result, from its meta kernel."""
    with FakeTensorMode():
        out = resolve_op(op)(*_fake_args(graph, args, constants))
    return tuple(out.stride())


def _through_view(graph: Graph, y: str, read: dict, outputs: set[str]) -> tuple[str, Epilogue] | None:
    """A linear layer on 3-d input is `view(addmm(view(x)))`: the activation reads the view of the result. When a
    view alone reads `y` and an activation alone reads the view, the activation can run first (it is elementwise):
    the view's result and the epilogue to fuse into `y`'s op."""
    users = read.get(y, [])
    if y in outputs or len(users) != 1:
        return None
    view = graph.nodes[users[0]]
    if view.op not in VIEWS or not view.args or view.args[0] != Ref(y) or len(view.outputs) != 1:
        return None
    act = match_epilogue(graph, view.outputs[0], read, outputs)
    return (view.outputs[0], act) if act is not None and act.final not in outputs else None


def _rewrite(graph: Graph, i: int, read: dict, outputs: set[str], state: tuple,
             renames: dict[str, str]) -> tuple[tuple[Node, ...], tuple[int, ...]] | None:
    """The fused node replacing node i, and the indices of the activation's nodes it absorbed. An activation after
    a view of the result (`_through_view`) is fused too; its readers then read the view (put in `renames`)."""
    taken, constants, values = state
    node = graph.nodes[i]
    is_conv = node.op == CONVOLUTION
    act = match_epilogue(graph, node.outputs[0], read, outputs)
    through = None if act is not None or is_conv else _through_view(graph, node.outputs[0], read, outputs)
    if through is not None:
        act = through[1]
    args = (_conv_args if is_conv else _linear_args)(graph, node, taken, constants)
    if args is None:
        return None
    attr, scalars, algorithm = (act.attr, act.scalars, act.algorithm) if act else ("none", (), "")
    final = act.final if act else node.outputs[0]
    if through is not None:
        renames[act.final] = through[0]
        final = node.outputs[0]
    op = CONV_POINTWISE if is_conv else LINEAR_POINTWISE
    args += [attr, scalars, algorithm or None] if is_conv else [attr, scalars, algorithm]
    layout, declared = _layout(op, graph, args, constants), values[final]
    absorbed = act.absorbed if act else ()
    if final not in outputs or layout == declared.stride:
        values[final] = declared.replace(stride=layout)
        return (Node((final,), op, tuple(args), {}, dict(node.meta)),), absorbed
    # a result the graph returns keeps eager's layout: oneDNN's is copied back to it; the nodes that read it read
    # oneDNN's (the next convolution without a reorder)
    if memory_format_of(declared) is None:  # no copy gives that layout back
        return None
    packed = fresh_name(graph, f"{final}_packed", taken)
    copy = copy_to_layout(packed, final, declared, node.meta)
    values[packed] = declared.replace(stride=layout)
    renames[final] = packed
    return (Node((packed,), op, tuple(args), {}, dict(node.meta)), copy), absorbed


class PrepackWeights:
    """The graph pass (point `freeze`): `prepack_weights`."""

    id = "prepack-weights"

    def run(self, graph: Graph) -> Graph:
        return prepack_weights(graph)[0]

    @staticmethod
    def summary(before: Graph, after: Graph) -> dict[str, int]:
        def packed(g: Graph) -> list[Node]:
            return [n for n in g.nodes if n.op in (CONV_POINTWISE, LINEAR_POINTWISE)]
        fused = [n for n in packed(after) if n.args[-3] != "none"]  # the fused activation's attr
        return {"prepacked_weights": len(packed(after)) - len(packed(before)),
                "fused_epilogues": len(fused) - sum(n.args[-3] != "none" for n in packed(before))}


def prepack_weights(graph: Graph) -> tuple[Graph, int, int]:
    """`graph` with its convolutions and linear layers on oneDNN; how many were rewritten, how many activations
    fused. Dead constants (the unpacked weights) are left for `drop_dead`."""
    if not available(graph):
        return graph, 0, 0
    read, outputs = readers(graph), output_names(graph)
    constants, values = dict(graph.constants), dict(graph.values)
    state = (set(), constants, values)
    nodes: list[tuple[Node, ...]] = [(n,) for n in graph.nodes]  # each node's replacement: none, one or two
    packed = fused = 0
    renames: dict[str, str] = {}
    for i, node in enumerate(graph.nodes):
        if node.op not in (CONVOLUTION, "aten.addmm.default", "aten.mm.default") or len(node.outputs) != 1:
            continue
        done = _rewrite(graph.replace(constants=constants, values=values), i, read, outputs, state, renames)
        if done is None:
            continue
        nodes[i], absorbed = done  # the fused node, and the copy to eager's layout of a result the graph returns
        packed += 1
        fused += bool(absorbed)
        for j in absorbed:
            nodes[j] = ()
    kept = tuple(rename_reads(n, renames) for group in nodes for n in group)
    # each packed convolution's result as the graph declared it; those returned are copied back to that layout
    convolutions = {n.outputs[0] for n in kept if n.op == CONV_POINTWISE}
    returned = {packed: final for final, packed in renames.items() if packed in convolutions}
    relaid = {name: graph.values[returned.get(name, name)] for name in convolutions}
    out = prune_values(graph.replace(nodes=kept, constants=constants, values=values))  # absorbed nodes' values
    return follow_layouts(out, relaid, returned) if relaid else out, packed, fused

