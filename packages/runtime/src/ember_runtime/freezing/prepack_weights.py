"""Pass `prepack-weights`: CPU convolutions and linear layers with constant weights call oneDNN's fused ops.

- `aten.convolution` (2-d, not transposed, float32) → `mkldnn._convolution_pointwise` with the weight reordered once
  into oneDNN's blocked layout (`mkldnn._reorder_convolution_weight`, for the traced input size);
- `aten.addmm` / `aten.mm` with a constant `(in, out)` weight (float32, 2-d input) → `mkldnn._linear_pointwise`
  with the `(out, in)` weight made contiguous once;
- an activation that alone reads the result (relu, gelu, silu, hardswish, hardsigmoid, sigmoid, tanh, hardtanh,
  leaky_relu; as one node or as capture decomposes it, `_epilogues.py`) is fused into the op's epilogue.

Both ops have meta kernels, so the new nodes run under FakeTensorMode, which gives their outputs' layout (oneDNN's
convolution writes channels-last). Lowering calls them as extern ATen kernels, like `aten.convolution`. Left alone:
symbolic sizes, other dtypes and devices, and every node when oneDNN is not available. The new layout is safe for
the nodes after: lowering's views are index maps over logical indices, whatever the strides.
`benchmarks/freezing_ops.py` measures what each rewrite gains."""

from __future__ import annotations

from typing import Any

import torch
from ember_core import Graph, Node, Ref, graph_device
from torch._subclasses.fake_tensor import FakeTensorMode

from ._edit import add_constant, constant_of, fresh_name, output_names, readers
from ._epilogues import match_epilogue

PASS_ID = "prepack-weights"
CONVOLUTION = "aten.convolution.default"
CONV_POINTWISE = "mkldnn._convolution_pointwise.default"
LINEAR_POINTWISE = "mkldnn._linear_pointwise.default"


def available(graph: Graph) -> bool:
    return torch.backends.mkldnn.is_available() and torch.device(graph_device(graph)).type == "cpu"


def _static_f32(graph: Graph, arg: Any, dims: int) -> bool:
    v = graph.values.get(arg.name) if isinstance(arg, Ref) else None
    return (v is not None and v.type == "tensor" and v.dtype == "float32" and len(v.shape) == dims
            and all(isinstance(d, int) for d in (*v.shape, *v.stride)))


def _ints(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(i, int) for i in x)


def _conv_args(graph: Graph, node: Node, taken: set[str], constants: dict) -> list | None:
    """`_convolution_pointwise`'s arguments up to `groups`, with the packed weight stored; or None."""
    if node.kwargs or len(node.args) != 9:
        return None
    x, w_ref, b_ref, stride, padding, dilation, transposed, _, groups = node.args
    w, b = constant_of(graph, w_ref), constant_of(graph, b_ref)
    if w is None or w.dtype != torch.float32 or w.dim() != 4 or w.is_mkldnn or transposed is not False:
        return None
    if (b_ref is not None and (b is None or b.dtype != torch.float32)) or not _static_f32(graph, x, 4):
        return None
    if not (_ints(stride) and _ints(padding) and _ints(dilation) and isinstance(groups, int)):
        return None
    shape = list(graph.values[x.name].shape)
    packed = torch.ops.mkldnn._reorder_convolution_weight(w.contiguous(), list(padding), list(stride), list(dilation),
                                                         groups, shape)
    name = fresh_name(graph, f"{w_ref.name}_packed", taken)
    return [x, add_constant(constants, name, packed), b_ref, tuple(padding), tuple(stride), tuple(dilation), groups]


def _linear_args(graph: Graph, node: Node, taken: set[str], constants: dict) -> list | None:
    """`_linear_pointwise`'s arguments up to the bias, with the `(out, in)` weight stored; or None."""
    args = list(node.args)
    if node.kwargs or len(args) != (3 if node.op == "aten.addmm.default" else 2):
        return None
    b_ref, x, w_ref = args if len(args) == 3 else (None, *args)
    w, b = constant_of(graph, w_ref), constant_of(graph, b_ref)
    if w is None or w.dtype != torch.float32 or w.dim() != 2 or not _static_f32(graph, x, 2):
        return None
    if b_ref is not None and (b is None or b.dim() != 1 or b.dtype != torch.float32 or b.shape[0] != w.shape[1]):
        return None
    name = fresh_name(graph, f"{w_ref.name}_t", taken)
    return [x, add_constant(constants, name, w.t().contiguous()), b_ref]


def _layout(op: str, graph: Graph, args: list, constants: dict) -> tuple[int, ...]:
    """The strides of the op's result, from its meta kernel."""
    def fake(a: Any) -> Any:
        if not isinstance(a, Ref):
            return a
        if a.name in constants:
            t = constants[a.name].tensor
            return torch.empty(tuple(t.shape), dtype=t.dtype)
        v = graph.values[a.name]
        return torch.empty_strided(v.shape, v.stride, dtype=torch.float32)
    with FakeTensorMode():
        out = getattr(torch.ops.mkldnn, op.split(".")[1]).default(*[list(a) if isinstance(a, tuple) else fake(a)
                                                                    for a in args])
    return tuple(out.stride())


def _rewrite(graph: Graph, i: int, read: dict, outputs: set[str], state: tuple) -> tuple[Node, tuple[int, ...]] | None:
    """The fused node replacing node i, and the indices of the activation's nodes it absorbed."""
    taken, constants, values = state
    node = graph.nodes[i]
    is_conv = node.op == CONVOLUTION
    act = match_epilogue(graph, node.outputs[0], read, outputs)
    args = (_conv_args if is_conv else _linear_args)(graph, node, taken, constants)
    if args is None:
        return None
    attr, scalars, algorithm = (act.attr, act.scalars, act.algorithm) if act else ("none", (), "")
    final = act.final if act else node.outputs[0]
    op = CONV_POINTWISE if is_conv else LINEAR_POINTWISE
    args += [attr, scalars, algorithm or None] if is_conv else [attr, scalars, algorithm]
    values[final] = values[final].replace(stride=_layout(op, graph, args, constants))
    return Node((final,), op, tuple(args), {}, dict(node.meta)), act.absorbed if act else ()


def prepack_weights(graph: Graph) -> tuple[Graph, int, int]:
    """`graph` with its convolutions and linear layers on oneDNN; how many were rewritten, how many activations
    fused. Dead constants (the unpacked weights) are left for `drop_dead`."""
    if not available(graph):
        return graph, 0, 0
    read, outputs = readers(graph), output_names(graph)
    constants, values = dict(graph.constants), dict(graph.values)
    state = (set(), constants, values)
    nodes: list[Node | None] = list(graph.nodes)
    packed = fused = 0
    for i, node in enumerate(graph.nodes):
        if node.op not in (CONVOLUTION, "aten.addmm.default", "aten.mm.default") or len(node.outputs) != 1:
            continue
        done = _rewrite(graph.replace(constants=constants, values=values), i, read, outputs, state)
        if done is None:
            continue
        nodes[i], absorbed = done
        packed += 1
        fused += bool(absorbed)
        for j in absorbed:
            nodes[j] = None
    kept = tuple(n for n in nodes if n is not None)
    return graph.replace(nodes=kept, constants=constants, values=values), packed, fused

