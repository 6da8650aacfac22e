"""The report's three diagrams of a graph, as `Diagram`s for `_svg.render_svg`:

- a captured graph, coloured by the kind of each op (view, matmul-like, reduction, pointwise);
- a joint graph, coloured by where the partition put each node (forward, backward, saved, recomputed), with the
  recomputed nodes that only the backward has;
- a compiled graph, coloured by the kernel that computes each node (from the plan's `origins`).

A box links to its node's line in the graph's text (`anchor(name)`), and its tooltip is that line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..graph._printer import default_region, format_node
from ..graph._schema import Graph, Node, node_refs
from ..plugins._stages import JointGraph, Partition
from ._svg import Diagram, DiagramNode, clip

Anchor = Callable[[str], "str | None"]  # value name → the href of its line in the text

VIEW_OPS = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
            "slice", "select", "split", "split_with_sizes", "unbind", "as_strided", "alias", "detach", "clone",
            "getitem", "contiguous", "_reshape_alias", "view_as_real", "view_as_complex"}
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "convolution_backward",
              "embedding", "embedding_dense_backward"}
REDUCTION_OPS = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "var_mean", "std", "prod",
                 "native_layer_norm", "native_layer_norm_backward", "_softmax", "_log_softmax",
                 "_softmax_backward_data", "_log_softmax_backward_data", "logsumexp", "any", "all",
                 "native_batch_norm", "native_batch_norm_backward", "cumsum", "nll_loss_forward",
                 "nll_loss_backward"}

OP_COLOURS = {"input": "#e7f5ff", "param": "#edf2ff", "view": "#f1f3f5", "matmul": "#e5dbff",
              "reduction": "#d3f9d8", "pointwise": "#fff3bf", "other": "#ffe8cc"}
OP_LEGEND = {"input": "input", "param": "parameter / buffer", "view": "view", "matmul": "matmul / conv / attention",
             "reduction": "reduction / norm", "pointwise": "pointwise"}
PART_COLOURS = {"primal": "#e7f5ff", "tangent": "#fff4e6", "forward": "#cfe2ff", "backward": "#ffd8a8",
                "saved": "#b2f2bb", "recomputed": "#fff3bf", "unused": "#f1f3f5"}
PART_LEGEND = {"forward": "forward", "saved": "forward, saved for the backward", "recomputed": "recomputed in the "
               "backward", "backward": "backward", "primal": "primal input", "tangent": "tangent input"}
KERNEL_PALETTE = ("#a5d8ff", "#b2f2bb", "#ffec99", "#ffc9c9", "#d0bfff", "#99e9f2", "#ffd8a8", "#c3fae8",
                  "#eebefa", "#d8f5a2")
KERNEL_LEGEND = {"k0": "a kernel (one colour each)", "extern": "extern call (ATen)", "none": "in no step's origins",
                 "input": "input"}


def op_short(op: str) -> str:
    """`aten.native_layer_norm.default` → `native_layer_norm`: the op without namespace and overload."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "ember") else op


def op_kind(op: str) -> str:
    short = op_short(op).rstrip("_")
    if short in VIEW_OPS:
        return "view"
    if short in MATMUL_OPS or "scaled_dot_product" in short or "flash_attention" in short:
        return "matmul"
    if short in REDUCTION_OPS:
        return "reduction"
    return "pointwise" if op.startswith(("aten.", "prims.")) else "other"


def captured_diagram(graph: Graph, anchor: Anchor) -> Diagram:
    def role(node: Node | None, name: str) -> str:
        if node is None:
            kind = next((i.kind for i in graph.inputs if i.name == name), "user")
            return "input" if kind == "user" else "param"
        return op_kind(node.op)

    return _graph_diagram(graph, anchor, role, OP_COLOURS, OP_LEGEND)


def partition_diagram(joint: JointGraph, partition: Partition, anchor: Anchor, backward_anchor: Anchor
                      ) -> Diagram:
    graph = joint.graph
    primals = set(graph.input_names[: joint.num_primals])
    forward = {o for n in partition.forward.nodes for o in n.outputs}
    backward = {o for n in partition.backward.nodes for o in n.outputs}
    saved = set(partition.saved)

    def role(node: Node | None, name: str) -> str:
        if node is None:
            return "primal" if name in primals else "tangent"
        in_fw, in_bw = name in forward, name in backward
        if in_fw and in_bw:
            return "recomputed"
        if in_fw:
            return "saved" if any(o in saved for o in node.outputs) else "forward"
        return "backward" if in_bw else "unused"

    diagram = _graph_diagram(graph, anchor, role, PART_COLOURS, PART_LEGEND)
    known = {n.key for n in diagram.nodes}
    for node in partition.backward.nodes:  # recomputed values the joint graph has no node for
        if node.outputs[0] not in known:
            _add_node(diagram, partition.backward, node, "recomputed", backward_anchor)
            known.update(node.outputs)
    return diagram


def kernel_diagram(graph: Graph, steps: Sequence[dict[str, Any]], anchor: Anchor) -> Diagram:
    owner: dict[str, tuple[int, dict[str, Any]]] = {}
    for k, step in enumerate(steps):
        for origin in step.get("origins", ()):
            owner.setdefault(origin, (k, step))

    def role(node: Node | None, name: str) -> str:
        if node is None:
            return "input"
        found = next((owner[o] for o in node.outputs if o in owner), None)
        if found is None:
            return "none"
        return "extern" if found[1].get("kind") == "extern" else f"k{found[0]}"

    def note(node: Node) -> str:
        found = next((owner[o] for o in node.outputs if o in owner), None)
        return f" · {found[1].get('name', '')}" if found is not None else ""

    colours = {f"k{k}": KERNEL_PALETTE[k % len(KERNEL_PALETTE)] for k in range(len(steps))}
    colours.update(extern="#e5dbff", none="#f8f9fa", input="#e7f5ff")
    return _graph_diagram(graph, anchor, role, colours, KERNEL_LEGEND, note)


def _graph_diagram(graph: Graph, anchor: Anchor, role: Callable[[Node | None, str], str], colours: dict[str, str],
                   legend: dict[str, str], note: Callable[[Node], str] | None = None) -> Diagram:
    diagram = Diagram(colours=dict(colours), legend=dict(legend))
    for inp in graph.inputs:
        shape = _shape(graph.values.get(inp.name))
        diagram.nodes.append(DiagramNode(inp.name, (clip(inp.name), clip(f"{inp.kind} {shape}")),
                                         role(None, inp.name), f"{inp.name}: {inp.kind} {shape}", anchor(inp.name),
                                         rounded=True))
    for node in graph.nodes:
        _add_node(diagram, graph, node, role(node, node.outputs[0]), anchor, note(node) if note else "")
    return diagram


def _add_node(diagram: Diagram, graph: Graph, node: Node, role: str, anchor: Anchor, note: str = "") -> None:
    key = node.outputs[0]
    tooltip = format_node(node, graph.values, default_region(graph))
    lines = (clip(op_short(node.op)), clip(", ".join(node.outputs) + note))
    diagram.nodes.append(DiagramNode(key, lines, role, tooltip, anchor(key)))
    diagram.edges += [(diagram.aliases.get(r, r), key) for r in dict.fromkeys(node_refs(node))]
    diagram.aliases.update({other: key for other in node.outputs[1:]})  # drawn as the node's one box


def _shape(v: Any) -> str:
    if v is None:
        return ""
    if v.type != "tensor":
        return v.type
    return f"{v.dtype}[{', '.join(map(str, v.shape))}]"
