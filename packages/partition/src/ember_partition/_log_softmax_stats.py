"""A log_softmax whose output the backward reads, written as its row statistics and a pointwise tail.

`_log_softmax(x, d)` is one reduction to the min-cut: to give its output to the backward it must save all of it,
the size of `x` (cross-entropy over a vocabulary: the logits' size, 65 MB for 2048 rows of 8000 classes in float32),
and the forward must write it though it reads only one element per row (the target's). Written as ATen computes it,

    m = amax(x, d, keepdim)            # statistics: one number per row each
    s = x - m
    l = log(sum(exp(s), d, keepdim))
    y = s - l                          # pointwise from x, m and l

the min-cut saves `m` and `l` and takes `y` again in the backward from `x` (an input, or itself cheap to take
again), and the lowering computes `y` in the forward only where something reads it. The order of operations is
ATen's (not `x - logsumexp(x)`, which rounds the small log-probabilities of large logits away), so the numbers
are those of the single op up to the order of the sum. Only float32 and float64 (in float16 and bfloat16 ATen keeps
the intermediate values in float32 and rounds once, which a chain of ops in that dtype would not), the input laid
out as the output, and symbolic sizes only where the statistics' strides stay numbers (any number of rows of a 2-d
log_softmax over its last dim, as cross-entropy has).
"""

from __future__ import annotations

import dataclasses

from ember_core import JointGraph, Node, Ref, Value, contiguous_stride, fresh_name

from ._refs import backward_reads

SPLIT_DTYPES = ("float32", "float64")


def split_log_softmax(joint: JointGraph) -> JointGraph:
    """`joint` with each forward `_log_softmax` that the backward reads split into statistics and a tail."""
    graph = joint.graph
    read_back = backward_reads(graph)
    nodes: list[Node] = []
    values, taken = dict(graph.values), set()
    for node in graph.nodes:
        parts = _splittable(node, values, read_back)
        if parts is None:
            nodes.append(node)
            continue
        x, d = parts
        nodes += _split(graph, node, x, d, values, taken)
    if not taken:
        return joint
    return dataclasses.replace(joint, graph=graph.replace(nodes=tuple(nodes), values=values))


def _splittable(node: Node, values: dict[str, Value], read_back: frozenset[str]) -> tuple[str, int] | None:
    """(input, dim) of a forward `_log_softmax` worth splitting, else None."""
    if node.op != "aten._log_softmax.default" or node.meta.get("region") != "forward" or len(node.args) < 2:
        return None
    x, dim = node.args[0], node.args[1]
    half_to_float = node.args[2] if len(node.args) > 2 else node.kwargs.get("half_to_float", False)
    out = node.outputs[0]
    if not isinstance(x, Ref) or not isinstance(dim, int) or half_to_float or out not in read_back:
        return None
    vx, vo = values.get(x.name), values.get(out)
    if vx is None or vo is None or vx.dtype != vo.dtype or vx.dtype not in SPLIT_DTYPES or not vx.shape:
        return None
    d = dim % len(vx.shape)
    if vx.shape != vo.shape or vx.stride != vo.stride or _row_stride(vo.shape, d) is None:
        return None
    return x.name, d


def _row_stride(shape: tuple, d: int) -> tuple[int, ...] | None:
    """The contiguous strides of the statistics (`shape` with dim `d` made 1), or None where one would be a
    symbolic product: sizes may be symbolic only where no stride multiplies them (a [rows, classes] log_softmax
    over its classes with any number of rows)."""
    row = tuple(1 if k == d else n for k, n in enumerate(shape))
    if not all(isinstance(n, int) for n in row[1:]):
        return None
    return contiguous_stride((1, *row[1:]))  # the first size enters no stride


def _split(graph, node: Node, x: str, d: int, values: dict[str, Value], taken: set[str]) -> list[Node]:
    """The six nodes that replace `node`; the last keeps its output's name and layout."""
    out = node.outputs[0]
    like = values[out]
    row = tuple(1 if k == d else n for k, n in enumerate(like.shape))
    stat = like.replace(shape=row, stride=_row_stride(like.shape, d), base=None, storage_offset=0)
    full = like.replace(base=None, storage_offset=0)  # laid out as x, as the output is (checked)
    meta = {**{k: v for k, v in node.meta.items() if k != "name"}, "splits": out}
    made: list[Node] = []

    def emit(base: str, op: str, args: tuple, value: Value, name: str | None = None) -> Ref:
        name = name or fresh_name(graph, f"{out}_{base}", taken)
        taken.add(name)
        values[name] = value
        made.append(Node((name,), op, args, {}, dict(meta)))
        return Ref(name)

    m = emit("max", "aten.amax.default", (Ref(x), (d,), True), stat)
    s = emit("shifted", "aten.sub.Tensor", (Ref(x), m), full)
    e = emit("exp", "aten.exp.default", (s,), full)
    total = emit("sum", "aten.sum.dim_IntList", (e, (d,), True), stat)
    log = emit("log", "aten.log.default", (total,), stat)
    emit("", "aten.sub.Tensor", (s, log), like, name=out)
    return made
