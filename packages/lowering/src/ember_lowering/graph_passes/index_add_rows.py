"""index-add-rows, a graph pass at `pre_lowering` on CPU graphs (an identity): `index_put(x, [i], v,
accumulate=True)` with one integer index tensor, a row of `x` per index, is `index_add(x, 0, j, w)`, where `j` is
`i` flattened with its negatives wrapped (`i + n` where `i < 0`, as index_put reads them) and `w` is `v` viewed as
one row per index.

Autograd writes an embedding's gradient so: BERT's adds 256 rows of 256 into its 30522 x 256 table. ATen's CPU
index_put with accumulate walks the values an element at a time, an offset computed for each (420 us for those
rows on an Intel Xeon, 2 threads); index_add adds a row at a time with the vectorized add (16 us). Both raise on an
index out of range (one below -n stays negative after the wrap); the wrap is a pointwise kernel that fuses with
whatever computes the index. Only the order in which rows of one index are added may differ: index_add adds them
in the order of the indices, a float sum as eager's. CUDA graphs keep index_put: CUDA's index_add adds with
atomics, in no fixed order, and raises under `torch.use_deterministic_algorithms`.

Taken where `x` is a floating tensor of static sizes and `v` has exactly the shape `i.shape + x.shape[1:]` (no
broadcast), both `i` and `v` contiguous; with symbolic sizes the graph is left as written.
"""

from __future__ import annotations

import logging
from math import prod

import torch
from ember_core import Graph, Node, Ref, Value, contiguous_stride, fresh_name, graph_device, is_static, memory_format_of

log = logging.getLogger("ember.kernels")

_INDEX_PUT = "aten.index_put.default"
_FLOATS = {"float16", "bfloat16", "float32", "float64"}
_INDEX_DTYPES = {"int64", "int32"}


class IndexAddRows:
    id = "index-add-rows"

    def run(self, graph: Graph) -> Graph:
        if not graph_device(graph).startswith("cpu"):
            return graph
        return index_add_rows(graph)


def index_add_rows(graph: Graph) -> Graph:
    """The graph with each row-indexed accumulating `index_put` made an `index_add` (see the module)."""
    taken: set[str] = set()
    values: dict[str, Value] = {}
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        parts = _rows_put(graph, node)
        if parts is None:
            nodes.append(node)
            continue
        x, i, v = parts
        nodes += _as_index_add(graph, node, x, i, v, taken, values)
        changed = True
    if not changed:
        return graph
    return graph.replace(nodes=tuple(nodes), values={**graph.values, **values})


def _rows_put(graph: Graph, node: Node) -> tuple[Value, Ref, Ref] | None:
    """(x's value, the index, the values) of an `index_put(x, [i], v, True)` this pass rewrites, else None."""
    if node.op != _INDEX_PUT or len(node.args) < 3:
        return None
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    base, indices, v = node.args[:3]
    if accumulate is not True or not isinstance(base, Ref) or not isinstance(v, Ref):
        return None
    if not isinstance(indices, (list, tuple)) or len(indices) != 1 or not isinstance(indices[0], Ref):
        return None
    x, i, vv = (graph.values.get(r.name) for r in (base, indices[0], v))
    if x is None or i is None or vv is None or x.dtype not in _FLOATS or vv.dtype != x.dtype:
        return None
    if i.dtype not in _INDEX_DTYPES or not x.shape or not is_static(x) or not is_static(i):
        return None
    if tuple(vv.shape) != (*i.shape, *x.shape[1:]) or not (_contiguous(i) and _contiguous(vv)):
        return None
    return x, indices[0], v


def _contiguous(v: Value) -> bool:
    return v.storage_offset == 0 and memory_format_of(v) is torch.contiguous_format


def _as_index_add(graph: Graph, node: Node, x: Value, i: Ref, v: Ref, taken: set[str],
                  values: dict[str, Value]) -> list[Node]:
    """The nodes that compute `node`'s result with `index_add`: the wrap of negative indices, the views to one row
    per index, the call (which writes `node`'s output)."""
    index, rows = graph.values[i.name], graph.values[v.name]
    meta, name = node.meta, node.outputs[0]

    def new(stem: str, value: Value) -> Ref:
        out = fresh_name(graph, f"{name}_{stem}", taken)
        values[out] = value
        return Ref(out)

    plain = index.replace(stride=contiguous_stride(index.shape), base=None, storage_offset=0, requires_grad=False)
    negative, shifted, j = new("negative", plain.replace(dtype="bool")), new("shifted", plain), new("wrapped", plain)
    out = [Node((negative.name,), "aten.lt.Scalar", (i, 0), {}, meta),
           Node((shifted.name,), "aten.add.Tensor", (i, x.shape[0]), {}, meta),
           Node((j.name,), "aten.where.self", (negative, shifted, i), {}, meta)]
    w = v
    if len(index.shape) != 1:
        count = prod(index.shape)
        flat = new("flat", plain.replace(shape=(count,), stride=(1,), base=j.name))
        out.append(Node((flat.name,), "aten.view.default", (j, (count,)), {}, meta))
        shape = (count, *x.shape[1:])
        w = new("rows", rows.replace(shape=shape, stride=contiguous_stride(shape), base=v.name))
        out.append(Node((w.name,), "aten.view.default", (v, shape), {}, meta))
        j = flat
    out.append(Node((name,), "aten.index_add.default", (node.args[0], 0, j, w), {}, meta))
    log.debug("index-add-rows %s: %d rows into %s", name, prod(index.shape), node.args[0].name)
    return out
