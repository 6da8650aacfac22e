"""Layouts after `prepack-weights` changed some: oneDNN's convolutions write channels-last where the graph was traced
contiguous. `follow_layouts` lays out every value computed from such a result as ATen computes it from the new
layout, and keeps what the graph returns as the graph declares it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ember_core import (
    RESHAPE,
    STRICT_VIEWS,
    Graph,
    Node,
    Ref,
    Value,
    copy_to_layout,
    fresh_name,
    is_static,
    is_view_op,
    memory_format_of,
    node_refs,
    rename_reads,
    returned_views,
    run_on_fakes,
    to_dtype,
)
from torch._subclasses.fake_tensor import FakeTensorMode

from ._edit import output_names

# Lowering treats views and reshapes alike; the interpreter codegen (every codegen's fallback) runs them as ATen does,
# so a strict view of a relaid value that ATen could not view runs as `reshape` (`run_on_fakes`).
VIEWS = (*STRICT_VIEWS, RESHAPE)


def follow_layouts(graph: Graph, relaid: Mapping[str, Value], returned: Mapping[str, str]) -> Graph:
    """Every value computed from a `relaid` value (name → the value as the graph declared it) laid out as ATen's
    meta kernels lay it out from the new layouts: the activations, pooling and residual adds after a channels-last
    convolution stay channels-last, so the next convolution reads them without a reorder, and ATen itself (the
    interpreter codegen, every codegen's fallback) computes what the graph says. `returned` maps a relaid value the
    graph returns a copy of (in its declared layout) to that copy.

    What the caller sees keeps its declared layout:
    - a returned value whose layout changes is computed under a new name (`{name}_relaid`) and copied to its
      declared layout (`copy_to_layout`); the nodes after it read the value before the copy;
    - a view on the way from a relaid value to a returned one views the value in its declared layout: the returned
      copy where there is one (so the two share storage, as in eager), else a copy made for the view;
    - a strict view (`view`, `_unsafe_view`) the new layout cannot take becomes `reshape`.
    Nodes with symbolic sizes, and ops that do not run under FakeTensorMode, keep the layouts the graph declares."""
    values, outputs, relaid = dict(graph.values), output_names(graph), dict(relaid)
    copies = dict(returned)  # a relaid value → its copy in the declared layout
    on_the_way = returned_views(graph)
    nodes: list[Node] = []
    renames: dict[str, str] = {}
    taken: set[str] = set()
    with FakeTensorMode():
        fakes = _Fakes(graph, values)
        for node in graph.nodes:
            node = rename_reads(node, renames)
            if not any(r in relaid for r in node_refs(node)):
                nodes.append(node)
                continue
            if is_view_op(node.op) and on_the_way.intersection(node.outputs) and isinstance(node.args[0], Ref) \
                    and node.args[0].name in relaid:
                source = node.args[0].name
                if source not in copies:
                    copies[source] = _declared_copy(graph, source, relaid[source], nodes, values, taken)
                if copies[source] is not None:
                    nodes.append(node.replace(args=(Ref(copies[source]), *node.args[1:])))
                    continue
            if all(r in graph.constants or _static(values.get(r)) for r in node_refs(node)):
                node, result = run_on_fakes(graph, node, fakes)
            else:
                node, result = node.replace(op=RESHAPE) if node.op in STRICT_VIEWS else node, None
            at, names = len(nodes), list(node.outputs)
            nodes.append(node)
            results = result if isinstance(result, (tuple, list)) else [result]
            for k, (name, t) in enumerate(zip(node.outputs, results)):
                if not isinstance(t, torch.Tensor) or not _static(values.get(name)):
                    continue
                if tuple(t.stride()) == values[name].stride and t.storage_offset() == values[name].storage_offset:
                    fakes[name] = t
                    continue
                if name in outputs:
                    if memory_format_of(values[name]) is None:  # no copy gives it back: ATen's is left as it is
                        continue
                    names[k] = fresh_name(graph, f"{name}_relaid", taken)
                    nodes.append(copy_to_layout(names[k], name, values[name], node.meta))
                    renames[name], copies[names[k]] = names[k], name
                relaid[names[k]] = values[name]
                values[names[k]] = values[name].replace(stride=tuple(t.stride()), storage_offset=t.storage_offset())
                fakes[names[k]] = t
            nodes[at] = node.replace(outputs=tuple(names))
    values = {k: v.replace(base=renames.get(v.base, v.base)) for k, v in values.items()} if renames else values
    return graph.replace(nodes=tuple(nodes), values=values)


def _static(v: Value | None) -> bool:
    return v is not None and v.type == "tensor" and is_static(v)


def _declared_copy(graph: Graph, source: str, want: Value, nodes: list[Node], values: dict[str, Value],
                   taken: set[str]) -> str | None:
    """A copy of `source` in its declared layout (`want`), appended to `nodes`: its name, or None when no memory
    format gives that layout."""
    if memory_format_of(want) is None:
        return None
    name = fresh_name(graph, f"{source}_declared", taken)
    nodes.append(copy_to_layout(source, name, want))
    values[name] = want.replace(base=None, storage_offset=0)
    return name


class _Fakes(dict):
    """Fake tensors of the graph's values by name: those the nodes' runs gave, else made from the values' records
    (constants from their tensors), under the caller's FakeTensorMode."""

    def __init__(self, graph: Graph, values: dict[str, Value]):
        super().__init__()
        self.graph, self.values = graph, values

    def __missing__(self, name: str) -> Any:
        if name in self.graph.constants:
            t = self.graph.constants[name].tensor
            fake = torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype)
        else:
            v = self.values[name]
            fake = torch.empty_strided(v.shape, v.stride, dtype=to_dtype(v.dtype), device=v.device) \
                if v.type == "tensor" else 1
        self[name] = fake
        return fake
