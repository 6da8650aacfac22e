"""The one canonical text form of a Graph: a header, one line per node, a return line. Deterministic, and read
back exactly by `parse_graph` (`_parser.py`):

    # ember graph v1.2 from ember-capture 0.1.0 trace
    # symbols: s0=8 in [2, inf]
    def f(x: f32[s0, 4] requires_grad, w: f32[4] param, n: sym:i64):
      c0: f32[3] = constant [0.5, 1.0, 2.0]
      t: f32[4, s0]{1, 4} requires_grad base=x = aten.t.default(x)  # model.py:3  module=fc
      v: f32[4, s0] = aten.add.Tensor(t, 1, alpha=2.5)
      return (v, t alias[0])

- Values: `DTYPE[sizes]`, then `{strides}` when they are not row-major, `@device` when not cpu, then the words
  `offset=D`, `requires_grad`, `base=NAME` when they apply. A `sym`, `scalar` or `none` value reads `sym:i64`.
- Arguments: a value's name `x`; ints `2`; floats `2.0`, `1e-05`, `inf`, `nan` (a dot, an exponent or a word:
  never an int); `True`/`False`; `None`; strings `"floor"` (JSON syntax); lists `[a, b]`; symbolic ints
  `sym(2*s0)`; dtypes `f16`; devices `@cuda:0`; layouts and memory formats `torch.strided`. Sizes inside a
  value's brackets are bare expressions (`sym(...)` only for text that would read as an int).
- Names that are not identifiers, or that are words of the grammar (`None`, `inf`, `f32` ...), read `%"name"`.
- Node metadata follows `#`: the source location, the region, then `key=value` pairs, sorted. When every node has
  a region and some are forward, the header says `# default region: forward` and only the others are noted.
- Constants of up to `INLINE_CONSTANT_NUMEL` elements print their data; larger ones read `constant [...]` and
  `parse_graph` takes their tensors separately.
- Subgraphs (the two graphs of each `ember.custom_function` call) follow the return line, in name order: a line
  `subgraph NAME:`, then the subgraph's own text indented by `SUBGRAPH_INDENT`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch

from ._dtypes import DTYPE_NAMES, SHORT_DTYPE_NAMES, dtype_name, short_dtype, to_dtype
from ._expr import ExprError
from ._json import INLINE_CONSTANT_NUMEL
from ._schema import REGIONS, Constant, Graph, Node, Output, Ref, Sym, Value
from ._symbolic import parse

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SUBGRAPH_INDENT = "    "
# Words that mean something in argument position; a value with such a name prints as `%"name"`.
RESERVED = frozenset({"None", "True", "False", "inf", "nan", *SHORT_DTYPE_NAMES.values()})
INT_TEXT = re.compile(r"-?[0-9]+")
_BARE_NOTE = re.compile(r'[^\s"=\\]+')  # a source location that needs no quotes
_BARE_NOTE_VALUE = re.compile(r'[^\s"\\]+')
_BARE_DEVICE = re.compile(r"[A-Za-z0-9_:]+")
NAMED_DTYPES = frozenset(to_dtype(n) for n in DTYPE_NAMES)
# Constant data the text can hold exactly (others read `[...]` at any size).
PRINTABLE_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                              torch.int16, torch.int8, torch.uint8, torch.bool})


def quote(text: str) -> str:
    """JSON string syntax, ASCII only (so no character of it can break a line)."""
    return json.dumps(text)


def format_name(name: str) -> str:
    return name if IDENT.fullmatch(name) and name not in RESERVED else "%" + quote(name)


# ---------------------------------------------------------------------------------------------- values

def row_major(shape: tuple) -> tuple | None:
    """The strides torch gives a contiguous tensor of this shape (a size-0 dim steps like a size-1 one), with
    symbolic strides as sympy prints them; None when a size does not parse."""
    strides: list = []
    step: Any = 1
    for d in reversed(shape):
        strides.append(step if isinstance(step, int) else (int(step) if step.is_Integer else str(step)))
        if isinstance(d, int):
            step = step * max(d, 1)
            continue
        try:
            step = parse(d) * step
        except ExprError:
            return None
    return tuple(reversed(strides))


def format_dim(d: int | str) -> str:
    """A size inside brackets: bare, or `sym(...)` for text that would read as an int or lose its spaces."""
    if isinstance(d, int):
        return str(d)
    return f"sym({d})" if not d or INT_TEXT.fullmatch(d.strip()) or d != d.strip() else d


def _dims(dims: tuple) -> str:
    return ", ".join(format_dim(d) for d in dims)


def _device(device: str) -> str:
    return "@" + (device if _BARE_DEVICE.fullmatch(device) else quote(device))


def format_value(v: Value) -> str:
    """`f32[s0, 128]`, strides in braces when not row-major, `@device` when not cpu, then its words."""
    dt = short_dtype(v.dtype)
    text = f"{dt}[{_dims(v.shape)}]" if v.type == "tensor" else f"{v.type}:{dt}" + (
        f"[{_dims(v.shape)}]" if v.shape else "")
    if tuple(v.stride) != row_major(tuple(v.shape)):
        text += "{" + _dims(v.stride) + "}"
    if v.device != "cpu":
        text += _device(v.device)
    if v.storage_offset != 0:
        offset = v.storage_offset
        text += f" offset={offset}" if isinstance(offset, int) else f" offset=sym({offset})"
    if v.requires_grad:
        text += " requires_grad"
    if v.base is not None:
        text += f" base={format_name(v.base)}"
    return text


# ---------------------------------------------------------------------------------------------- arguments

def format_arg(arg: Any) -> str:
    if isinstance(arg, Ref):
        return format_name(arg.name)
    if isinstance(arg, Sym):
        return f"sym({arg.expr})"
    if arg is None or isinstance(arg, (bool, float)):
        return repr(arg)
    if isinstance(arg, int):
        return str(arg)
    if isinstance(arg, str):
        return quote(arg)
    if isinstance(arg, (list, tuple)):
        return "[" + ", ".join(format_arg(a) for a in arg) + "]"
    if isinstance(arg, torch.dtype) and arg in NAMED_DTYPES:
        return short_dtype(dtype_name(arg))
    if isinstance(arg, torch.device):
        return _device(str(arg))
    if isinstance(arg, (torch.layout, torch.memory_format)):
        return str(arg)
    return repr(arg)  # outside the schema's argument tags: shown, but not read back


def _note(text: str, pattern: re.Pattern) -> str:
    return text if pattern.fullmatch(text) else quote(text)


def format_notes(meta: dict[str, str], default_region: str | None = None) -> str:
    """`  # model.py:12  backward  module=fc`: source first, the region unless it is the default, then the rest."""
    items = []
    if "source" in meta:
        source = meta["source"]
        items.append(quote(source) if source in REGIONS else _note(source, _BARE_NOTE))
    region = meta.get("region")
    if region is not None and region != default_region:
        items.append(region if region in REGIONS else f"region={_note(region, _BARE_NOTE_VALUE)}")
    for key in sorted(k for k in meta if k not in ("source", "region")):
        key_text = key if IDENT.fullmatch(key) else quote(key)
        items.append(f"{key_text}={_note(meta[key], _BARE_NOTE_VALUE)}")
    return "  # " + "  ".join(items) if items else ""


def format_node(node: Node, values: dict[str, Value], default_region: str | None = None) -> str:
    lhs = ", ".join(format_name(o) for o in node.outputs)
    types = ", ".join(format_value(values[o]) if o in values else "?" for o in node.outputs)
    args = [format_arg(a) for a in node.args]
    args += [f"{k if IDENT.fullmatch(k) else quote(k)}={format_arg(v)}" for k, v in sorted(node.kwargs.items())]
    return f"{lhs}: {types} = {node.op}({', '.join(args)})" + format_notes(node.meta, default_region)


# ---------------------------------------------------------------------------------------------- the graph

def default_region(graph: Graph) -> str | None:
    """"forward" when every node has a region and some have that one: such nodes then go unnoted."""
    regions = [n.meta.get("region") for n in graph.nodes]
    return "forward" if regions and None not in regions and "forward" in regions else None


def constant_data(tensor: torch.Tensor) -> str:
    """The flat data of a small constant, `[1.0, 2.0]`; `[...]` when it is large or of a dtype text cannot hold."""
    if tensor.numel() > INLINE_CONSTANT_NUMEL or tensor.dtype not in PRINTABLE_DTYPES:
        return "[...]"
    flat = tensor.detach().cpu()
    flat = (flat.to_dense() if flat.is_mkldnn else flat).reshape(-1)
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()
    return "[" + ", ".join(format_arg(x) for x in flat.tolist()) + "]"


def format_constant(c: Constant) -> str:
    t = c.tensor
    dt = short_dtype(dtype_name(t.dtype)) if t.dtype in NAMED_DTYPES else str(t.dtype)
    return f"{format_name(c.name)}: {dt}[{', '.join(map(str, t.shape))}] = constant {constant_data(t)}"


def format_output(o: Output) -> str:
    text = format_name(o.name)
    if o.kind != "user" or o.input is not None:
        text += f" {o.kind}" + (f"[{o.input}]" if o.input is not None else "")
    return text


def _header(graph: Graph) -> list[str]:
    producer = graph.producer
    if producer and (not producer.isprintable() or producer != producer.strip() or producer.startswith('"')):
        producer = quote(producer)
    lines = [f"# ember graph v{graph.version[0]}.{graph.version[1]}" + (f" from {producer}" if producer else "")]
    if graph.symbols:
        ranges = ((s, "inf" if s.upper is None else s.upper) for s in graph.symbols)
        lines.append("# symbols: " + ", ".join(f"{s.name}={s.hint} in [{s.lower}, {upper}]" for s, upper in ranges))
    region = default_region(graph)
    if region is not None:
        lines.append(f"# default region: {region}")
    params = []
    for inp in graph.inputs:
        v = graph.values.get(inp.name)
        text = f"{format_name(inp.name)}: {format_value(v) if v else '?'}"
        text += (f" {inp.kind}" if inp.kind != "user" else "") + (" mutated" if inp.mutated else "")
        params.append(text)
    lines.append(f"def {format_name(graph.name)}({', '.join(params)}):")
    return lines


def format_graph(graph: Graph, *, mark: int | None = None, window: int | None = None) -> str:
    """The text form. `mark` points an arrow at node index `mark`; `window` keeps that many nodes either side
    (a marked or shortened text is for people: `parse_graph` refuses it)."""
    lines = _header(graph)
    lines += [f"  {format_constant(c)}" for _, c in sorted(graph.constants.items())]
    lo, hi = 0, len(graph.nodes)
    if mark is not None and window is not None:
        lo, hi = max(0, mark - window), min(len(graph.nodes), mark + window + 1)
        if lo:
            lines.append(f"  ... {lo} nodes")
    region = default_region(graph)
    for i in range(lo, hi):
        prefix = "> " if i == mark else "  "
        lines.append(prefix + format_node(graph.nodes[i], graph.values, region))
    if hi < len(graph.nodes):
        lines.append(f"  ... {len(graph.nodes) - hi} nodes")
    lines.append(f"  return ({', '.join(format_output(o) for o in graph.outputs)})")
    if mark is None:  # an error's excerpt is about the graph itself
        lines += _subgraph_lines(graph)
    return "\n".join(lines)


def _subgraph_lines(graph: Graph) -> list[str]:
    lines = []
    for name in sorted(graph.subgraphs):
        lines.append(f"subgraph {format_name(name)}:")
        lines += [SUBGRAPH_INDENT + line for line in format_graph(graph.subgraphs[name]).split("\n")]
    return lines


Graph.__str__ = format_graph  # type: ignore[method-assign] - the graph's text form (see Graph)
