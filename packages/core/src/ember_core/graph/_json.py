"""The schema on disk: `ember-graph` JSON documents, with large constants in a side folder.

`graph_to_json` / `graph_from_json` convert to and from plain JSON data; `save` / `load` work with files.
Loading checks structure as it goes and raises `SchemaError` naming the path of the bad field.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .._errors import SchemaError
from .._regular_file import FileRefused, read_regular_file
from ._dtypes import dtype_name, tensor_of_numbers, to_dtype
from ._json_args import INT64, decode_arg, encode_arg, expect, int_in, sym_text
from ._schema import SCHEMA_VERSION, Constant, Graph, Input, Node, Output, Symbol, Value
from ._sizes import layout_problem, row_major_problem

FORMAT = "ember-graph"
INLINE_CONSTANT_NUMEL = 64  # constants up to this many elements are written inline

# Limits on what a document may hold: it is untrusted input (see README, "Untrusted input").
MAX_FILE_BYTES = 1 << 30  # a graph file, or a constant's side file
MAX_SUBGRAPH_DEPTH = 8  # subgraphs of subgraphs ... deeper than this are refused
MAX_INT_DIGITS = 40  # longer integer literals are refused while parsing (int64 needs 19)
MAX_CONSTANT_NUMEL = 1 << 31  # elements of one constant
_SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


# ---------------------------------------------------------------------------------------------- records

def _dim_to_json(d: Any) -> Any:
    return d if isinstance(d, int) else {"sym": d}


def _dim_from_json(d: Any, where: str) -> int | str:
    """A size, stride or storage offset: an int in [0, 2**63), or a symbolic expression."""
    if isinstance(d, int) and not isinstance(d, bool):
        return int_in(d, where, 0, INT64[1], "a size")
    if isinstance(d, dict) and set(d) == {"sym"}:
        return sym_text(d["sym"], where)
    raise SchemaError(where, f"expected an int or {{\"sym\": expr}}, got {d!r}"[:200])


def _value_to_json(v: Value) -> dict:
    return {
        "type": v.type,
        "dtype": v.dtype,
        "shape": [_dim_to_json(d) for d in v.shape],
        "stride": [_dim_to_json(d) for d in v.stride],
        "device": v.device,
        "requires_grad": v.requires_grad,
        "base": v.base,
        "storage_offset": _dim_to_json(v.storage_offset),
    }


def _constant_to_json(c: Constant, side_dir: Path | None) -> dict:
    t = c.tensor.detach().cpu()
    if t.is_mkldnn:  # a weight pre-packed by freezing: written as plain data (the op reading it takes either)
        t = t.to_dense()
    out: dict[str, Any] = {"dtype": dtype_name(t.dtype), "shape": list(t.shape)}
    if t.numel() <= INLINE_CONSTANT_NUMEL or side_dir is None:
        flat = t.reshape(-1)
        if t.dtype == torch.bfloat16 or t.dtype == torch.float16:
            flat = flat.float()
        out["data"] = [encode_arg(x) for x in flat.tolist()]
    else:
        side_dir.mkdir(parents=True, exist_ok=True)
        torch.save(t.contiguous(), side_dir / f"{c.name}.pt")
        out["file"] = f"{side_dir.name}/{c.name}.pt"
    return out


def graph_to_json(graph: Graph, side_dir: Path | None = None) -> dict:
    """Plain JSON data for a graph. Constants above the inline limit go to `side_dir` when one is given."""
    return {
        "format": FORMAT,
        "version": list(graph.version),
        "name": graph.name,
        "producer": graph.producer,
        "symbols": [{"name": s.name, "hint": s.hint, "lower": s.lower, "upper": s.upper} for s in graph.symbols],
        "inputs": [{"name": i.name, "kind": i.kind, "mutated": i.mutated} for i in graph.inputs],
        "nodes": [
            {
                "outputs": list(n.outputs),
                "op": n.op,
                "args": [encode_arg(a) for a in n.args],
                "kwargs": {k: encode_arg(v) for k, v in n.kwargs.items()},
                "meta": dict(n.meta),
            }
            for n in graph.nodes
        ],
        "outputs": [{"name": o.name, "kind": o.kind, "input": o.input} for o in graph.outputs],
        "values": {name: _value_to_json(v) for name, v in graph.values.items()},
        "constants": {name: _constant_to_json(c, side_dir) for name, c in graph.constants.items()},
        # a subgraph's constants travel inline: side files are named by the top graph's constants alone
        "subgraphs": {name: graph_to_json(sub) for name, sub in graph.subgraphs.items()},
    }


# ---------------------------------------------------------------------------------------------- reading

class _Record:
    """Reads the fields of one JSON object, then rejects leftovers unless the document is from a newer minor."""

    def __init__(self, data: Any, where: str, lenient: bool):
        self.data = expect(data, dict, where)
        self.where, self.lenient, self.seen = where, lenient, set()

    def get(self, key: str, typ: type | tuple, default: Any = ...) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise SchemaError(self.where, f"missing field {key!r}")
            return default
        return expect(self.data[key], typ, f"{self.where}.{key}")

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra and not self.lenient:
            raise SchemaError(self.where, f"unknown field(s) {', '.join(map(repr, extra))}")


def _read_version(data: dict, where: str) -> tuple[tuple[int, int], bool]:
    v = data.get("version")
    if not (isinstance(v, list) and len(v) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 16 for x in v)):
        raise SchemaError(f"{where}version", f"expected [major, minor], two small integers, got {v!r}"[:200])
    return check_version(*v, f"{where}version")


def check_version(major: int, minor: int, where: str) -> tuple[tuple[int, int], bool]:
    """(version, whether it is a newer minor); a major other than this ember-core's is a `SchemaError`."""
    if major != SCHEMA_VERSION[0]:
        raise SchemaError(
            where,
            f"schema version {major}.{minor} is not supported by this ember-core "
            f"(it reads {SCHEMA_VERSION[0]}.x); use an ember-core release for schema {major}.x",
        )
    return (major, minor), minor > SCHEMA_VERSION[1]


def _read_value(data: Any, where: str, lenient: bool, hints: Mapping[str, int]) -> Value:
    r = _Record(data, where, lenient)
    value = Value(
        type=r.get("type", str),
        dtype=r.get("dtype", str),
        shape=tuple(_dim_from_json(d, f"{where}.shape[{i}]") for i, d in enumerate(r.get("shape", list))),
        stride=tuple(_dim_from_json(d, f"{where}.stride[{i}]") for i, d in enumerate(r.get("stride", list))),
        device=r.get("device", str),
        requires_grad=r.get("requires_grad", bool),
        base=r.get("base", (str, type(None)), None),
        storage_offset=_dim_from_json(r.get("storage_offset", (int, dict), 0), f"{where}.storage_offset"),
    )
    r.done()
    problem = layout_problem(value.shape, value.stride, value.storage_offset, hints)
    if problem is not None:
        raise SchemaError(f"{where}.{problem[0]}", problem[1])
    return value


def _read_node(data: Any, where: str, lenient: bool) -> Node:
    r = _Record(data, where, lenient)
    outputs = r.get("outputs", list)
    args = r.get("args", list)
    kwargs = r.get("kwargs", dict, {})
    meta = r.get("meta", dict, {})
    node = Node(
        outputs=tuple(expect(o, str, f"{where}.outputs[{i}]") for i, o in enumerate(outputs)),
        op=r.get("op", str),
        args=tuple(decode_arg(a, f"{where}.args[{i}]") for i, a in enumerate(args)),
        kwargs={k: decode_arg(v, f"{where}.kwargs.{k}") for k, v in kwargs.items()},
        meta={k: expect(v, str, f"{where}.meta.{k}") for k, v in meta.items()},
    )
    r.done()
    return node


def _read_constant(name: str, data: Any, where: str, lenient: bool, base_dir: Path | None) -> Constant:
    r = _Record(data, where, lenient)
    try:
        dtype = to_dtype(r.get("dtype", str))
    except ValueError as e:
        raise SchemaError(f"{where}.dtype", str(e)) from None
    shape = [int_in(d, f"{where}.shape[{i}]", 0, INT64[1], "a size") for i, d in enumerate(r.get("shape", list))]
    numel = check_constant_shape(shape, f"{where}.shape")
    if "file" in r.data:
        tensor = _read_side_file(r.get("file", str), f"{where}.file", base_dir)
    else:
        items = r.get("data", list)
        if len(items) != numel:
            raise SchemaError(f"{where}.data", f"{len(items)} numbers for shape {shape} ({numel} elements)")
        flat = [decode_arg(x, f"{where}.data[{i}]") for i, x in enumerate(items)]
        try:
            tensor = tensor_of_numbers(flat, dtype)
        except ValueError as e:
            raise SchemaError(f"{where}.data", f"not a list of {dtype_name(dtype)} numbers: {e}") from None
    r.done()
    if tensor.dtype != dtype or tuple(tensor.shape) not in (tuple(shape), (numel,)):
        raise SchemaError(where, f"constant data does not match dtype {dtype_name(dtype)} and shape {shape}")
    return Constant(name, tensor.reshape(shape))


def check_constant_shape(shape: list[int], where: str) -> int:
    """The element count of a constant's shape, within the limit and with row-major strides that int64 holds."""
    problem = row_major_problem(shape)
    if problem is not None:
        raise SchemaError(where, f"its row-major {problem[0]}: {problem[1]}")
    numel = math.prod(shape)
    if numel > MAX_CONSTANT_NUMEL:
        raise SchemaError(where, f"{numel} elements, more than the limit of {MAX_CONSTANT_NUMEL}")
    return numel


def _read_side_file(rel: str, where: str, base_dir: Path | None) -> torch.Tensor:
    if base_dir is None:
        raise SchemaError(where, "constant stored in a side file, but the graph was not loaded from a file")
    path = (base_dir / rel).resolve()
    if base_dir.resolve() not in path.parents:
        raise SchemaError(where, f"side file {rel!r} lies outside the graph's folder")
    data = read_checked(path, where, "side file")
    try:
        # weights_only: torch's restricted unpickler, which builds tensors and refuses every other object
        tensor = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # a corrupt side file
        raise SchemaError(where, f"cannot read side file {path}: {e}"[:500]) from None
    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.device.type != "cpu" \
            or tensor.is_quantized:
        what = type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else f"{tensor.layout} tensor"
        raise SchemaError(where, f"side file {path} holds a {what}, not a plain tensor")
    return tensor.detach().contiguous()


def graph_from_json(data: Any, where: str = "", base_dir: Path | None = None) -> Graph:
    """Build a Graph from JSON data. `where` prefixes error paths (a file name, say)."""
    return _graph_from_json(data, where, base_dir, 0)


def _graph_from_json(data: Any, where: str, base_dir: Path | None, depth: int) -> Graph:
    prefix = f"{where}: " if where else ""
    data = expect(data, dict, where or "document")
    if data.get("format") != FORMAT:
        raise SchemaError(f"{prefix}format", f"expected {FORMAT!r}, got {data.get('format')!r}")
    version, lenient = _read_version(data, prefix)
    r = _Record(data, where or "document", lenient)
    r.seen |= {"format", "version"}

    def items(key: str) -> list:
        return r.get(key, list)

    symbols = tuple(_read_symbol(s, f"{prefix}symbols[{i}]", lenient) for i, s in enumerate(items("symbols")))
    hints = {s.name: s.hint for s in symbols}
    graph = Graph(
        name=r.get("name", str),
        producer=r.get("producer", str, ""),
        symbols=symbols,
        inputs=tuple(_read_input(x, f"{prefix}inputs[{i}]", lenient) for i, x in enumerate(items("inputs"))),
        nodes=tuple(_read_node(n, f"{prefix}nodes[{i}]", lenient) for i, n in enumerate(items("nodes"))),
        outputs=tuple(_read_output(o, f"{prefix}outputs[{i}]", lenient) for i, o in enumerate(items("outputs"))),
        values={
            k: _read_value(v, f"{prefix}values.{k}", lenient, hints) for k, v in r.get("values", dict).items()
        },
        constants={
            k: _read_constant(k, v, f"{prefix}constants.{k}", lenient, base_dir)
            for k, v in r.get("constants", dict, {}).items()
        },
        version=(SCHEMA_VERSION if lenient else version),
        subgraphs=_read_subgraphs(r.get("subgraphs", dict, {}), f"{prefix}subgraphs", depth),
    )
    r.done()
    return graph


def _read_subgraphs(data: dict, where: str, depth: int) -> dict[str, Graph]:
    if data and depth >= MAX_SUBGRAPH_DEPTH:
        raise SchemaError(where, f"subgraphs nested deeper than {MAX_SUBGRAPH_DEPTH}")
    return {k: _graph_from_json(v, f"{where}.{k}", None, depth + 1) for k, v in data.items()}


def _read_symbol(data: Any, where: str, lenient: bool) -> Symbol:
    r = _Record(data, where, lenient)
    name = r.get("name", str)
    if not _SYMBOL_NAME.fullmatch(name):
        raise SchemaError(f"{where}.name", f"symbol names are identifiers, got {name!r}"[:200])
    symbol = make_symbol(name, r.get("hint", int), r.get("lower", int, 0), r.get("upper", (int, type(None)), None),
                         where)
    r.done()
    return symbol


def make_symbol(name: str, hint: int, lower: int, upper: int | None, where: str) -> Symbol:
    """A symbol record, its numbers checked: int64s (a size is never negative, an int the program passed may be),
    the hint inside [lower, upper]."""
    int_in(hint, f"{where}.hint", *INT64, "an int64")
    int_in(lower, f"{where}.lower", *INT64, "an int64")
    if upper is not None:
        int_in(upper, f"{where}.upper", lower, INT64[1], "an upper bound at least the lower bound")
    if not lower <= hint <= (hint if upper is None else upper):
        raise SchemaError(f"{where}.hint", f"hint {hint} lies outside the symbol's range [{lower}, {upper}]")
    return Symbol(name, hint, lower, upper)


def _read_input(data: Any, where: str, lenient: bool) -> Input:
    r = _Record(data, where, lenient)
    i = Input(r.get("name", str), r.get("kind", str, "user"), r.get("mutated", bool, False))
    r.done()
    return i


def _read_output(data: Any, where: str, lenient: bool) -> Output:
    r = _Record(data, where, lenient)
    o = Output(r.get("name", str), r.get("kind", str, "user"), r.get("input", (int, type(None)), None))
    r.done()
    return o


# ---------------------------------------------------------------------------------------------- files

def json_schema_path(major: int = SCHEMA_VERSION[0]) -> Path:
    """The JSON Schema (draft 2020-12) file of `ember-graph` documents of a schema major version."""
    path = Path(__file__).with_name("schema") / f"graph-v{major}.json"
    if not path.is_file():
        raise SchemaError("version", f"ember-core ships no JSON Schema for schema version {major}.x")
    return path


def json_schema(major: int = SCHEMA_VERSION[0]) -> dict:
    """The JSON Schema of `ember-graph` documents, as data (validate with the `jsonschema` package)."""
    return json.loads(json_schema_path(major).read_text())


def dumps(graph: Graph) -> str:
    """The JSON text of a graph with every constant inline."""
    return graph_text(graph_to_json(graph))


_ENCODE = json.JSONEncoder(separators=(", ", ": ")).encode


def graph_text(data: dict) -> str:
    """A graph's JSON data as text for people and diffs: one field a line, and inside the lists and maps of more
    than one record (nodes, values, inputs...) one record a line, each line encoded compactly. (`json.dumps` with an
    `indent` takes Python's pure-Python encoder, about 15x slower than its C one, for text no easier to read.)"""
    fields = []
    for key, value in data.items():
        if isinstance(value, list) and len(value) > 1 and isinstance(value[0], (dict, list)):
            inner = ",\n".join(f"  {_ENCODE(item)}" for item in value)
            fields.append(f" {_ENCODE(key)}: [\n{inner}\n ]")
        elif isinstance(value, dict) and len(value) > 1 and isinstance(next(iter(value.values())), (dict, list)):
            inner = ",\n".join(f"  {_ENCODE(k)}: {_ENCODE(v)}" for k, v in value.items())
            fields.append(f" {_ENCODE(key)}: {{\n{inner}\n }}")
        else:
            fields.append(f" {_ENCODE(key)}: {_ENCODE(value)}")
    return "{\n" + ",\n".join(fields) + "\n}"


def _int_literal(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (the limit is {MAX_INT_DIGITS})")
    return int(text)


def _parse_json(text: str, where: str) -> Any:
    """JSON text as data; too deep or too large numbers are `SchemaError`s, not Python crashes."""
    try:
        return json.loads(text, parse_int=_int_literal)
    except json.JSONDecodeError as e:
        raise SchemaError(where, f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise SchemaError(where, "JSON nested deeper than Python can read") from None
    except ValueError as e:
        raise SchemaError(where, f"not readable JSON: {e}") from None


def loads(text: str, where: str = "") -> Graph:
    return graph_from_json(_parse_json(text, where or "document"), where)


def save(graph: Graph, path: str | os.PathLike) -> Path:
    """Write a graph file atomically; constants above the inline limit go to `<file stem>.data/`."""
    path = Path(path)
    data = graph_to_json(graph, side_dir=path.with_name(path.stem + ".data"))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(graph_text(data) + "\n")
    os.replace(tmp, path)
    return path


def read_checked(path: Path, where: str, what: str) -> bytes:
    """The bytes of a regular file under the size limit (a fifo would block a read, a device never end it);
    `SchemaError` naming the file otherwise."""
    try:
        return read_regular_file(path, MAX_FILE_BYTES)
    except FileRefused as e:
        raise SchemaError(where, f"cannot read {what} {path}: {e}") from None


def read_graph_file(path: Path, what: str) -> str:
    """The text of a graph file (JSON or text form), checked to be a regular file within the size limit and
    UTF-8; `SchemaError` naming the file otherwise. `what` says which kind of file, for the message."""
    data = read_checked(path, str(path), what)
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise SchemaError(str(path), f"cannot read {what}: {e}") from None


def load(path: str | os.PathLike) -> Graph:
    """Read a graph file; errors name the file and the field."""
    path = Path(path)
    text = read_graph_file(path, "graph file")
    return graph_from_json(_parse_json(text, str(path)), str(path), base_dir=path.parent)
