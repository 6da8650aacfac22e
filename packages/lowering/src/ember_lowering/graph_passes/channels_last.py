"""Pass `channels-last` (graphs with 2-d convolutions, on a GPU or the CPU): the graph's convolutions and the work
between them run in NHWC, where that is measured faster.

cuDNN's fast convolution kernels read and write NHWC. Given NCHW tensors it converts around every call: resnet50
inference on an H200 spent 1.07 ms a call, a quarter of ember's GPU time, in `nchwToNhwcKernel` and
`nhwcToNchwKernel`. On the CPU oneDNN's kernels are NHWC too, and which layout is faster depends on the
convolutions: mobilenetv3's training step took 31 ms NCHW and 25 ms NHWC (depthwise convolutions and their
backward), resnet18's 46 and 60 (Zen 5, 2 threads).

Here each convolution's input and weight are made channels-last where they are not
(`clone(x, memory_format=channels_last)`): once at the graph's edges, since a convolution of channels-last
operands writes channels-last, and the pointwise ops, norms and pooling after it keep that layout as eager's
kernels do. Every value's layout is then what ATen's meta kernels give for the new operands (the graph run once
under FakeTensorMode); a `view` that the new layout cannot take becomes `reshape`. A user output keeps the layout
it had (copied back), and a view it returns views such a copy of its base (the returned one where the base is
returned too, so they share storage as in eager); a graph whose inputs it writes or aliases in another layout is
left alone.

For training the pass runs before autograd, so the backward is traced from the channels-last forward (its
`convolution_backward` reads and writes NHWC as well); a weight's gradient reaches `.grad` in the parameter's own
layout (autograd's accumulation obeys it). A frozen graph converts its weights once (`fold-constants` on a GPU,
`prepack-weights` on the CPU).

Decided per graph (`decide`, by default `measured` in `_conv_layouts.py`: the graph's convolutions timed in both
layouts on its device, forward and, where it trains, backward; the choice kept on disk). Declined or not (symbolic
sizes, an op the layout cannot be inferred through), the reason is logged on `ember.kernels`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch
from ember_core import (
    Graph,
    Node,
    Output,
    Ref,
    Value,
    copy_to_layout,
    fresh_name,
    graph_device,
    memory_format_of,
    returned_views,
    run_on_fakes,
    to_dtype,
)
from torch._subclasses.fake_tensor import FakeTensorMode

from ._conv_layouts import PASS_ID, Conv, measured

log = logging.getLogger("ember.kernels")
CONVOLUTION = "aten.convolution.default"


class ChannelsLast:
    """The pass; `decide(convs)` says whether a graph with these convolutions runs channels-last (default:
    `measured`), `device_types` which graphs it considers."""

    id = PASS_ID

    def __init__(self, decide: Callable[[Sequence[Conv]], bool] | None = None,
                 device_types: tuple[str, ...] = ("cuda", "cpu")):
        self.decide = decide or measured
        self.device_types = device_types

    def run(self, graph: Graph) -> Graph:
        if torch.device(graph_device(graph)).type not in self.device_types:
            return graph
        convs = [c for n in graph.nodes if n.op == CONVOLUTION and (c := _conv(graph, n)) is not None]
        if not convs:
            return graph
        if graph.symbols or not self.decide(convs):
            log.info("channels-last: graph %r stays NCHW (%s)", graph.name,
                     "symbolic sizes" if graph.symbols else "measured or judged faster")
            return graph
        try:
            relaid = _relaid(graph)
        except LayoutRefused as e:
            log.info("channels-last: graph %r stays NCHW: %s", graph.name, e)
            return graph
        log.info("channels-last: graph %r runs its %d convolutions in NHWC", graph.name, len(convs))
        return relaid


class LayoutRefused(Exception):
    """The graph cannot run channels-last faithfully (the reason says why)."""


def _conv(graph: Graph, node: Node) -> Conv | None:
    """A 2-d, not transposed convolution of static 4-d tensors, or None. Its backward's gradients are those of the
    operands that require grad, under grad mode (the graph trains)."""
    if len(node.args) != 9 or node.kwargs or node.args[6] is not False:
        return None
    x, w = (graph.values.get(a.name) if isinstance(a, Ref) else None for a in node.args[:2])
    out = graph.values.get(node.outputs[0])
    if not all(v is not None and v.type == "tensor" and len(v.shape) == 4 and all(isinstance(d, int) for d in v.shape)
               for v in (x, w, out)):
        return None
    groups = node.args[8]
    macs = out.shape[0] * out.shape[1] * out.shape[2] * out.shape[3] * w.shape[1] * w.shape[2] * w.shape[3]
    stride, padding, dilation = (tuple(a) if isinstance(a, (list, tuple)) else (a, a) for a in node.args[3:6])
    if not all(isinstance(v, int) for v in (*stride, *padding, *dilation)):
        return None
    bias = graph.values.get(node.args[2].name) if isinstance(node.args[2], Ref) else None
    grads = tuple(torch.is_grad_enabled() and v is not None and v.requires_grad for v in (x, w, bias))
    return Conv(groups, w.shape[1], w.shape[0] // max(groups, 1), macs, x.shape, w.shape, stride, padding, dilation,
                x.dtype, graph_device(graph), grads)


def _relaid(graph: Graph) -> Graph:
    """The graph with channels-last convolution operands and every layout inferred again (one walk under
    FakeTensorMode: on the graph's device where this torch can make fake tensors there, a CUDA build with a GPU or
    not; a CPU-only torch walks on the CPU, its convolutions' results laid out by cuDNN's rule), user outputs
    copied back to their layouts; `LayoutRefused` when that cannot be done faithfully."""
    device = _fake_device(graph_device(graph))
    emulated = device.type != torch.device(graph_device(graph)).type
    values, nodes, taken, converted, declared = dict(graph.values), [], set(), {}, {}
    viewed = returned_views(graph, [o.name for o in graph.outputs if o.kind == "user"])
    with FakeTensorMode():
        env = {c.name: torch.empty_strided(c.tensor.shape, c.tensor.stride(), dtype=c.tensor.dtype, device=device)
               for c in graph.constants.values()}
        for inp in graph.inputs:
            v = graph.values[inp.name]
            env[inp.name] = torch.empty_strided(v.shape, v.stride, dtype=to_dtype(v.dtype), device=device) \
                if v.type == "tensor" else 1
        for node in graph.nodes:
            if node.op == CONVOLUTION and _conv(graph, node) is not None:
                args = list(node.args)
                for k in (0, 1):
                    args[k] = _nhwc(graph, args[k], env, values, nodes, taken, converted, node)
                node = node.replace(args=tuple(args))
            if viewed.intersection(node.outputs) and isinstance(node.args[0], Ref):
                source = _as_declared(graph, node.args[0], env, values, nodes, taken, declared, node)
                node = node.replace(args=(source, *node.args[1:]))
            node, result = run_on_fakes(graph, node, env)  # a view the new layout cannot take becomes reshape
            if result is None:
                raise LayoutRefused(f"no layout for {node.outputs[0]} ({node.op}) under FakeTensorMode")
            if emulated and node.op == CONVOLUTION:
                result = _as_cudnn_writes(result, env, node)
            _record(node, result, env, values)
            nodes.append(node)
    return _outputs_as_before(graph, graph.replace(nodes=tuple(nodes), values=values), taken, declared)


def _record(node: Node, result, env: dict, values: dict[str, Value]) -> None:
    """The node's results into `env`, their strides and offsets into `values`."""
    results = result if isinstance(result, (tuple, list)) and len(node.outputs) > 1 else [result]
    for name, t in zip(node.outputs, results):
        env[name] = t
        if isinstance(t, torch.Tensor) and name in values:
            if tuple(t.shape) != values[name].shape:
                raise LayoutRefused(f"{name}'s shape changed: {tuple(t.shape)}, was {values[name].shape}")
            values[name] = values[name].replace(stride=tuple(t.stride()), storage_offset=t.storage_offset())


def _nhwc(graph: Graph, ref: Ref, env: dict, values: dict, nodes: list, taken: set, converted: dict,
          at: Node) -> Ref:
    """`ref`, or its channels-last copy (made once per value, its fake in `env`)."""
    if ref.name in converted:
        return converted[ref.name]
    t = env[ref.name]
    if t.is_contiguous(memory_format=torch.channels_last):
        return ref
    name = fresh_name(graph, f"{ref.name}_nhwc", taken)
    env[name] = t.contiguous(memory_format=torch.channels_last)
    like = values.get(ref.name) or Value("tensor", str(t.dtype).removeprefix("torch."), tuple(t.shape), (),
                                         graph_device(graph))
    values[name] = like.replace(stride=tuple(env[name].stride()), base=None, storage_offset=0)
    nodes.append(Node((name,), "aten.clone.default", (ref,), {"memory_format": torch.channels_last}, at.meta))
    converted[ref.name] = Ref(name)
    return converted[ref.name]


def _as_declared(graph: Graph, ref: Ref, env: dict, values: dict, nodes: list, taken: set, declared: dict,
                 at: Node) -> Ref:
    """`ref` in the layout the graph declares for it: itself, or its copy in that layout (made once per value, its
    fake in `env`), for a view the graph returns to view; `LayoutRefused` when no memory format gives the layout."""
    want = graph.values.get(ref.name)
    if ref.name in declared or want is None or tuple(env[ref.name].stride()) == want.stride:
        return declared.get(ref.name, ref)
    if memory_format_of(want) is None:
        raise LayoutRefused(f"{ref.name}, viewed by an output, has a layout no memory format gives: {want.stride}")
    name = fresh_name(graph, f"{ref.name}_out", taken)
    copy = copy_to_layout(ref.name, name, want, at.meta)
    _, env[name] = run_on_fakes(graph, copy, env)
    values[name] = want.replace(base=None, storage_offset=0)
    nodes.append(copy)
    declared[ref.name] = Ref(name)
    return declared[ref.name]


def _as_cudnn_writes(result: torch.Tensor, env: dict, node: Node) -> torch.Tensor:
    """A convolution's result laid out as cuDNN writes it: channels-last when its input or weight is (the CPU's
    meta kernels pick a backend by size and may write NCHW)."""
    operands = [env[a.name] for a in node.args[:2]]
    if any(t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) for t in operands):
        return result.contiguous(memory_format=torch.channels_last)
    return result


def _outputs_as_before(before: Graph, after: Graph, taken: set[str], declared: dict[str, Ref]) -> Graph:
    """User outputs whose layout changed copied back to it (the copy a returned view reads, where there is one, so
    the two share storage); `LayoutRefused` for any other output that changed."""
    values, nodes, outputs = dict(after.values), list(after.nodes), []
    for out in after.outputs:
        old, new = before.values.get(out.name), after.values.get(out.name)
        if old is None or new is None or old.stride == new.stride:
            outputs.append(out)
            continue
        if out.kind != "user":
            raise LayoutRefused(f"output {out.name} ({out.kind}) would change its layout")
        if out.name in declared:
            outputs.append(Output(declared[out.name].name, out.kind, out.input))
            continue
        name = fresh_name(after, f"{out.name}_out", taken)
        copy = copy_to_layout(out.name, name, old)
        if copy is None:
            raise LayoutRefused(f"output {out.name} has a layout no memory format gives: {old.stride}")
        values[name] = old.replace(base=None, storage_offset=0)
        nodes.append(copy)
        outputs.append(Output(name, out.kind, out.input))
    return after.replace(nodes=tuple(nodes), values=values, outputs=tuple(outputs))



def _fake_device(device: str) -> torch.device:
    """`device` when this torch can make fake tensors there (a CUDA build, GPU or not), else the CPU."""
    target = torch.device(device)
    if target.type == "cuda" and not torch.backends.cuda.is_built():
        return torch.device("cpu")
    return target
