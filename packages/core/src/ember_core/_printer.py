"""The one canonical text form of a Graph: a header, one line per node, a return line. Deterministic."""

from __future__ import annotations

from typing import Any

import torch

from ._dtypes import dtype_name, short_dtype
from ._schema import Graph, Node, Ref, Sym, Value


def is_contiguous(shape: tuple, stride: tuple) -> bool:
    """Row-major layout? Dims of size 1 may have any stride, as in torch. Symbolic dims compare as expressions."""
    from ._symbolic import parse

    expected = parse("1")
    for d, s in zip(reversed(shape), reversed(stride)):
        if d == 1:
            continue
        if parse(str(s)) != expected:
            return False
        expected = expected * parse(str(d))
    return True


def format_value(v: Value) -> str:
    """`f32[s0, 128]`; strides follow in braces when they are not row-major; `sym`/`scalar` print their dtype."""
    if v.type != "tensor":
        return f"{v.type}:{short_dtype(v.dtype)}"
    text = f"{short_dtype(v.dtype)}[{', '.join(map(str, v.shape))}]"
    if v.shape and not is_contiguous(v.shape, v.stride):
        text += "{" + ", ".join(map(str, v.stride)) + "}"
    if v.device != "cpu":
        text += f"@{v.device}"
    return text


def format_arg(arg: Any) -> str:
    if isinstance(arg, Ref):
        return arg.name
    if isinstance(arg, Sym):
        return arg.expr
    if isinstance(arg, (list, tuple)):
        return "[" + ", ".join(format_arg(a) for a in arg) + "]"
    if isinstance(arg, torch.dtype):
        return short_dtype(dtype_name(arg))
    if isinstance(arg, str):
        return repr(arg)
    if isinstance(arg, (torch.device, torch.layout, torch.memory_format)):
        return str(arg).removeprefix("torch.")
    return repr(arg)


def format_node(node: Node, values: dict[str, Value]) -> str:
    lhs = ", ".join(node.outputs)
    types = ", ".join(format_value(values[o]) if o in values else "?" for o in node.outputs)
    args = [format_arg(a) for a in node.args] + [f"{k}={format_arg(v)}" for k, v in sorted(node.kwargs.items())]
    line = f"{lhs}: {types} = {node.op}({', '.join(args)})"
    notes = [node.meta[k] for k in ("source",) if k in node.meta]
    if "region" in node.meta and node.meta["region"] != "forward":
        notes.append(node.meta["region"])
    return line + (f"  # {'  '.join(notes)}" if notes else "")


def format_graph(graph: Graph, *, mark: int | None = None, window: int | None = None) -> str:
    """The text form. `mark` points an arrow at node index `mark`; `window` keeps that many nodes either side."""
    header = f"# ember graph v{graph.version[0]}.{graph.version[1]}"
    lines = [header + (f" from {graph.producer}" if graph.producer else "")]
    if graph.symbols:
        ranges = ((s, "inf" if s.upper is None else s.upper) for s in graph.symbols)
        syms = ", ".join(f"{s.name}={s.hint} in [{s.lower}, {upper}]" for s, upper in ranges)
        lines.append(f"# symbols: {syms}")
    params = []
    for inp in graph.inputs:
        v = graph.values.get(inp.name)
        text = f"{inp.name}: {format_value(v) if v else '?'}"
        if inp.kind != "user":
            text += f" {inp.kind}"
        if inp.mutated:
            text += " mutated"
        params.append(text)
    lines.append(f"def {graph.name}({', '.join(params)}):")
    for name, c in sorted(graph.constants.items()):
        shape = ", ".join(map(str, c.tensor.shape))
        lines.append(f"  {name}: {short_dtype(dtype_name(c.tensor.dtype))}[{shape}] = constant")
    lo, hi = 0, len(graph.nodes)
    if mark is not None and window is not None:
        lo, hi = max(0, mark - window), min(len(graph.nodes), mark + window + 1)
        if lo:
            lines.append(f"  ... {lo} nodes")
    for i in range(lo, hi):
        prefix = "> " if i == mark else "  "
        lines.append(prefix + format_node(graph.nodes[i], graph.values))
    if hi < len(graph.nodes):
        lines.append(f"  ... {len(graph.nodes) - hi} nodes")
    outs = []
    for o in graph.outputs:
        text = o.name
        if o.kind != "user":
            text += f" {o.kind}" + (f"[{o.input}]" if o.input is not None else "")
        outs.append(text)
    lines.append(f"  return ({', '.join(outs)})")
    return "\n".join(lines)
