"""A picture of a joint graph: Graphviz DOT text, one box per node, coloured by where a partition put it.

Colours: forward (blue), backward (orange), saved, i.e. a forward node whose result the backward reads (green),
recomputed, i.e. a forward node the backward runs again (yellow); inputs are ellipses. DOT text is always
written; SVG too when the `dot` program (or the `graphviz` package with it) is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ember_core import JointGraph, Partition, Value

from ._refs import node_reads

COLOURS = {
    "forward": "#cfe2ff",
    "backward": "#ffd8a8",
    "saved": "#b2f2bb",
    "recomputed": "#fff3bf",
    "unused": "#f1f3f5",
    "primal": "#e7f5ff",
    "tangent": "#fff4e6",
}


def joint_diagram(joint: JointGraph, partition: Partition | None = None) -> str:
    """DOT text of the joint graph, coloured by `partition` (else by each node's `meta["region"]`)."""
    graph = joint.graph
    roles = _roles(joint, partition)
    saved = set(partition.saved) if partition is not None else set()
    ids = {name: f"i{k}" for k, name in enumerate(graph.input_names)}
    ids.update({o: f"n{i}" for i, n in enumerate(graph.nodes) for o in n.outputs})
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;",
             '  node [shape=box, style="filled,rounded", fontname="Helvetica", fontsize=10];', *_legend()]
    for k, inp in enumerate(graph.inputs):
        role = "tangent" if k >= joint.num_primals else "primal"
        extra = ', penwidth=3, color="#2b8a3e"' if inp.name in saved else ""
        label = _label(inp.name, f"{inp.kind}  {_shape(graph.values[inp.name])}")
        lines.append(f'  i{k} [shape=ellipse, fillcolor="{COLOURS[role]}", label={label}{extra}];')
    for i, node in enumerate(graph.nodes):
        is_saved = any(o in saved for o in node.outputs)
        role = "saved" if is_saved and roles[i] == "forward" else roles[i]
        extra = ', penwidth=3, color="#2b8a3e"' if is_saved else ""
        extra += ', style="filled,rounded,dashed"' if role == "recomputed" else ""
        shapes = ", ".join(_shape(graph.values[o]) for o in node.outputs)
        label = _label(", ".join(node.outputs), node.op, shapes)
        lines.append(f'  n{i} [fillcolor="{COLOURS[role]}", label={label}{extra}];')
        lines += [f"  {ids[r]} -> n{i};" for r in node_reads(node) if r in ids]
    lines += _backward_only_nodes(partition, ids) if partition is not None else []
    lines.append("}")
    return "\n".join(lines) + "\n"


def partition_diagram(partition: Partition, title: str = "") -> str:
    """DOT text of a partition drawn from its two halves alone (a warm start reuses the partition without tracing
    the joint graph): the forward's inputs and nodes (saved values green), the backward's tangents and nodes (those
    that recompute a forward value yellow, dashed), each saved value's edge into the backward. `title` is drawn as
    the diagram's label ("from the disk cache")."""
    fwd, bwd = partition.forward, partition.backward
    saved = set(partition.saved)
    computed_forward = {o for n in fwd.nodes for o in n.outputs}
    ids = {name: f"i{k}" for k, name in enumerate(fwd.input_names)}
    lines = [f"digraph {_quote(fwd.name)} {{", "  rankdir=TB;",
             '  node [shape=box, style="filled,rounded", fontname="Helvetica", fontsize=10];', *_legend()]
    if title:
        lines.append(f"  labelloc=t; label={_label(title)};")
    for k, inp in enumerate(fwd.inputs):
        extra = ', penwidth=3, color="#2b8a3e"' if inp.name in saved else ""
        label = _label(inp.name, f"{inp.kind}  {_shape(fwd.values[inp.name])}")
        lines.append(f'  i{k} [shape=ellipse, fillcolor="{COLOURS["primal"]}", label={label}{extra}];')
    for i, node in enumerate(fwd.nodes):
        ids.update({o: f"f{i}" for o in node.outputs})
        is_saved = any(o in saved for o in node.outputs)
        extra = ', penwidth=3, color="#2b8a3e"' if is_saved else ""
        shapes = ", ".join(_shape(fwd.values[o]) for o in node.outputs)
        colour = COLOURS["saved" if is_saved else "forward"]
        lines.append(f'  f{i} [fillcolor="{colour}", label={_label(", ".join(node.outputs), node.op, shapes)}{extra}];')
        lines += [f"  {ids[r]} -> f{i};" for r in node_reads(node) if r in ids]
    for k, inp in enumerate(bwd.inputs):
        if inp.name not in ids:  # a tangent (a saved value is drawn where the forward made it)
            ids[inp.name] = f"t{k}"
            label = _label(inp.name, f"{inp.kind}  {_shape(bwd.values[inp.name])}")
            lines.append(f'  t{k} [shape=ellipse, fillcolor="{COLOURS["tangent"]}", label={label}];')
    for i, node in enumerate(bwd.nodes):
        recomputed = any(o in computed_forward for o in node.outputs)
        ids.update({o: f"b{i}" for o in node.outputs})
        role = "recomputed" if recomputed else "backward"
        extra = ', style="filled,rounded,dashed"' if recomputed else ""
        shapes = ", ".join(_shape(bwd.values[o]) for o in node.outputs)
        lines.append(f'  b{i} [fillcolor="{COLOURS[role]}", label={_label(", ".join(node.outputs), node.op, shapes)}'
                     f"{extra}];")
        lines += [f"  {ids[r]} -> b{i};" for r in node_reads(node) if r in ids]
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_diagram(path: str | Path, joint: JointGraph, partition: Partition | None = None) -> list[Path]:
    """Write `<path>.dot`, and `<path>.svg` when Graphviz can render it; return the files written."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".dot", ".svg") else path
    text = joint_diagram(joint, partition)
    dot_file = stem.parent / (stem.name + ".dot")
    dot_file.parent.mkdir(parents=True, exist_ok=True)
    dot_file.write_text(text)
    written = [dot_file]
    svg = render_svg(text)
    if svg is not None:
        svg_file = stem.parent / (stem.name + ".svg")
        svg_file.write_text(svg)
        written.append(svg_file)
    return written


def render_svg(dot_text: str) -> str | None:
    """SVG of DOT text through the `dot` program or the `graphviz` package; None when neither is installed."""
    exe = shutil.which("dot")
    if exe is not None:
        try:
            done = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError):  # dot that cannot start or hangs: DOT text only
            return None
        return done.stdout if done.returncode == 0 else None
    try:
        import graphviz  # noqa: PLC0415  (optional)

        return graphviz.Source(dot_text).pipe(format="svg", encoding="utf-8")
    except Exception:  # not installed, or installed without the dot program
        return None


def _roles(joint: JointGraph, partition: Partition | None) -> list[str]:
    graph = joint.graph
    if partition is None:
        return [n.meta.get("region", "forward") for n in graph.nodes]
    fwd = {o for n in partition.forward.nodes for o in n.outputs}
    bwd = {o for n in partition.backward.nodes for o in n.outputs}
    roles = []
    for node in graph.nodes:
        out = node.outputs[0]
        roles.append("recomputed" if out in fwd and out in bwd else "forward" if out in fwd
                     else "backward" if out in bwd else "unused")
    return roles


def _backward_only_nodes(partition: Partition, ids: dict[str, str]) -> list[str]:
    """Recomputed nodes the joint graph does not have (a norm's output taken again from its statistics)."""
    lines = []
    for k, node in enumerate(partition.backward.nodes):
        if node.outputs[0] in ids:
            continue
        ids.update({o: f"r{k}" for o in node.outputs})
        shapes = ", ".join(_shape(partition.backward.values[o]) for o in node.outputs)
        label = _label(", ".join(node.outputs), node.op, shapes)
        lines.append(f'  r{k} [fillcolor="{COLOURS["recomputed"]}", style="filled,rounded,dashed", label={label}];')
        lines += [f"  {ids[r]} -> r{k};" for r in node_reads(node) if r in ids]
    return lines


def _legend() -> list[str]:
    roles = ("forward", "backward", "saved", "recomputed")
    rows = "".join(f'<TR><TD BGCOLOR="{COLOURS[k]}">{k}</TD></TR>' for k in roles)
    return [f'  legend [shape=plaintext, style="", label=<<TABLE BORDER="0" CELLBORDER="1">{rows}</TABLE>>];']


def _shape(v: Value) -> str:
    return f"{v.dtype}[{', '.join(map(str, v.shape))}]" if v.type == "tensor" else v.type


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(*lines: str) -> str:
    """A quoted DOT label, one line per argument."""
    return '"' + "\\n".join(_quote(line)[1:-1] for line in lines) + '"'
