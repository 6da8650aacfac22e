"""`parse_graph(text)`: the Graph a canonical text describes, exactly: `parse_graph(format_graph(g)) == g`.

The grammar is the printer's (`_printer.py` shows it by example). Text is untrusted input: nothing in it is
evaluated (sizes go through `_expr.py`'s grammar, strings through `json`, op names through `resolve_op`, layouts
through a table), lengths and nesting have the limits of `_json.py`, and every way it can be wrong ends in a
`SchemaError` naming the line and the field, with the column marked.

What the text cannot hold: the data of constants above `INLINE_CONSTANT_NUMEL` elements (or of dtypes without a
printable number form), which reads `constant [...]`; `parse_graph` takes their tensors in `constants=` (a
subgraph's under `SUBGRAPH/NAME`, as `text_constants` keys them), and `load_text` from the JSON file the dump
wrote beside the text. A text shortened or marked for an error message
(`format_graph(mark=..., window=...)`) is refused.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from .._errors import GraphError, SchemaError
from ._dtypes import DTYPE_NAMES, short_dtype, to_dtype
from ._json import (
    MAX_FILE_BYTES,
    MAX_SUBGRAPH_DEPTH,
    check_constant_shape,
    check_version,
    load,
    make_symbol,
    read_graph_file,
)
from ._json_args import INT64
from ._ops import resolve_op
from ._printer import IDENT, SUBGRAPH_INDENT, row_major
from ._schema import (
    INPUT_KINDS,
    OUTPUT_KINDS,
    REGIONS,
    SCHEMA_VERSION,
    VALUE_TYPES,
    Constant,
    Graph,
    Input,
    Node,
    Output,
    Symbol,
    Value,
)
from ._sizes import layout_problem
from ._text_args import WORD, argument_list, arguments, constant_data, device_text, notes, type_text
from ._text_cursor import Cursor

MAX_TEXT_CHARS = MAX_FILE_BYTES  # a graph's text; longer is refused before reading
MAX_LINE_CHARS = 1 << 20
_HEADER = re.compile(r"# ember graph v([0-9]{1,5})\.([0-9]{1,5})(?: from (.*))?")
_SCHEMA_DTYPES = {short_dtype(n): n for n in DTYPE_NAMES}  # `f32` → "float32"


def parse_graph(text: str, *, constants: Mapping[str, torch.Tensor] | None = None, where: str = "") -> Graph:
    """The Graph of a canonical text. `constants` gives the tensors of constants whose data the text leaves out
    (`[...]`); `where` (a file name, say) prefixes error locations."""
    if not isinstance(text, str):
        raise SchemaError(where or "text", f"expected text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise SchemaError(where or "text", f"{len(text)} characters, longer than the limit of {MAX_TEXT_CHARS}")
    return _Reader(text, constants or {}, where).graph()


def text_constants(graph: Graph) -> dict[str, torch.Tensor]:
    """Every constant's tensor, keyed as `parse_graph(constants=)` takes them: `NAME` for the graph's own,
    `SUBGRAPH/NAME` for a subgraph's (and so on down)."""
    found = {name: c.tensor for name, c in graph.constants.items()}
    for sub_name, sub in graph.subgraphs.items():
        found.update({f"{sub_name}/{k}": t for k, t in text_constants(sub).items()})
    return found


def load_text(path: str | os.PathLike, constants: Mapping[str, torch.Tensor] | None = None) -> Graph:
    """Read a graph text file, like the `.txt` files `EMBER_DUMP` writes. The tensors of large constants come from
    `constants`, else from the JSON file of the same name beside it (the dump writes both)."""
    path = Path(path)
    text = read_graph_file(path, "graph text file")
    if constants is None and "= constant [...]" in text and path.suffix == ".txt":
        beside = path.with_name(path.name.removesuffix(".txt") + ".json")
        constants = text_constants(load(beside)) if beside.is_file() else None
    return parse_graph(text, constants=constants, where=str(path))


class _Reader:
    """Reads the lines in order: header, header comments, `def`, body, `return`."""

    def __init__(self, text: str, constants: Mapping[str, torch.Tensor], where: str, first_line: int = 0,
                 depth: int = 0):
        self.lines = text.split("\n")
        self.k = 0
        self.where = f"{where}: " if where else ""
        self.given = constants
        self.first_line, self.depth = first_line, depth  # where a subgraph's text starts in the whole text
        self.hints: dict[str, int] = {}  # each symbol's hint, for the sizes of the values (`_sizes.py`)

    def next(self) -> Cursor | None:
        """The next line that is not blank, or None at the end."""
        while self.k < len(self.lines):
            line = self.lines[self.k].removesuffix("\r")
            self.k += 1
            if len(line) > MAX_LINE_CHARS:
                raise SchemaError(f"{self.where}line {self.k + self.first_line}",
                                  f"longer than {MAX_LINE_CHARS} characters")
            if line.strip():
                return Cursor(line, self.k + self.first_line, self.where)
        return None

    def required(self, what: str) -> Cursor:
        c = self.next()
        if c is None:
            raise SchemaError(f"{self.where}line {len(self.lines) + self.first_line}",
                              f"expected {what} before the end of the text")
        return c

    def graph(self) -> Graph:
        version, producer = self.header(self.required("'# ember graph vMAJOR.MINOR'"))
        symbols, region, c = self.comments()
        self.hints = {s.name: s.hint for s in symbols}
        name, inputs, values = self.signature(c)
        nodes, constants, outputs = self.body(values, region)
        subgraphs = self.subgraphs()
        return Graph(name=name, inputs=inputs, nodes=nodes, outputs=outputs, values=values, symbols=symbols,
                     constants=constants, producer=producer, version=version, subgraphs=subgraphs)

    # ------------------------------------------------------------------------------------------ subgraphs

    def subgraphs(self) -> dict[str, Graph]:
        """`subgraph NAME:` lines after the return line, each followed by its graph's text, indented."""
        found: dict[str, Graph] = {}
        while (c := self.next()) is not None:
            c.field = "subgraph"
            if not c.take("subgraph "):
                raise c.fail("text after the return line; expected 'subgraph NAME:' or the end", 0)
            if self.depth >= MAX_SUBGRAPH_DEPTH:
                raise c.fail(f"subgraphs nested deeper than {MAX_SUBGRAPH_DEPTH}", 0)
            start, name = c.pos, c.name()
            c.expect(":")
            c.end()
            if name in found:
                raise c.fail(f"subgraph {name!r} given twice", start)
            given = {k.partition("/")[2]: t for k, t in self.given.items() if k.startswith(name + "/")}
            first_line, text = self.indented_block()
            where = f"{self.where}subgraph {name}"
            found[name] = _Reader(text, given, where, first_line, self.depth + 1).graph()
        return found

    def indented_block(self) -> tuple[int, str]:
        """(the number of the line before it, the text) of the indented lines that follow, the indent removed."""
        first, lines = self.k + self.first_line, []
        while self.k < len(self.lines):
            line = self.lines[self.k].removesuffix("\r")
            if line.strip() and not line.startswith(SUBGRAPH_INDENT):
                break
            lines.append(line[len(SUBGRAPH_INDENT):])
            self.k += 1
        return first, "\n".join(lines)

    # ------------------------------------------------------------------------------------------ header

    def header(self, c: Cursor) -> tuple[tuple[int, int], str]:
        m = _HEADER.fullmatch(c.line)
        if m is None:
            hint = "; this is a JSON graph file (ember_core.load reads those)" if c.line.startswith("{") else ""
            raise c.fail(f"expected '# ember graph vMAJOR.MINOR' as the first line{hint}")
        c.field = "version"
        version, newer = check_version(int(m[1]), int(m[2]), f"{self.where}line {c.lineno}, version")
        producer = m[3] or ""
        if producer.startswith('"'):
            c.field, c.pos = "producer", m.start(3)
            producer = c.string()
            c.end()
        return (SCHEMA_VERSION if newer else version), producer

    def comments(self) -> tuple[tuple[Symbol, ...], str | None, Cursor]:
        """The `# symbols:` and `# default region:` lines, and the line after them."""
        symbols: tuple[Symbol, ...] | None = None
        region: str | None = None
        c = self.required("'def NAME(inputs):'")
        while c.line.startswith("#"):
            if symbols is None and c.take("# symbols: "):
                symbols = self.symbols(c)
            elif region is None and c.take("# default region: "):
                region = c.ident("a region")
                if region not in REGIONS:
                    raise c.fail(f"unknown region {region!r}; regions are {', '.join(REGIONS)}")
                c.end()
            else:
                raise c.fail("unknown or repeated header line; expected '# symbols: ...' or '# default region: ...'")
            c = self.required("'def NAME(inputs):'")
        return symbols or (), region, c

    def symbols(self, c: Cursor) -> tuple[Symbol, ...]:
        out = []
        while True:
            c.field = f"symbols[{len(out)}]"
            name = c.ident("a symbol name")
            c.expect("=")
            hint = c.int_in(*INT64, "a hint")
            c.expect(" in [")
            lower = c.int_in(*INT64, "a lower bound")
            c.expect(", ")
            upper = None if c.take_word("inf") else c.int_in(*INT64, "an upper bound or inf")
            c.expect("]")
            out.append(make_symbol(name, hint, lower, upper, f"{self.where}line {c.lineno}, {c.field}"))
            if not c.take(", "):
                c.end()
                return tuple(out)

    def signature(self, c: Cursor) -> tuple[str, tuple[Input, ...], dict[str, Value]]:
        c.field = "def"
        c.expect("def ", "'def NAME(inputs):'")
        name = c.name()
        c.expect("(")
        inputs: list[Input] = []
        values: dict[str, Value] = {}
        while not c.take(")"):
            if inputs:
                c.expect(", ", "', ' or ')'")
            c.field = f"inputs[{len(inputs)}]"
            start, input_name = c.pos, c.name()
            c.expect(": ")
            _define(c, values, input_name, self.value(c), start)
            inputs.append(Input(input_name, *self.input_words(c)))
        c.expect(":")
        c.end()
        return name, tuple(inputs), values

    def input_words(self, c: Cursor) -> tuple[str, bool]:
        kind, mutated = "user", False
        while True:
            c.spaces()
            start, word = c.pos, c.match(IDENT)
            if word is None:
                return kind, mutated
            if word == "mutated" and not mutated:
                mutated = True
            elif word in INPUT_KINDS and kind == "user":
                kind = word
            else:
                raise c.fail(f"unexpected {word!r}; an input's type is followed by its kind "
                             f"({', '.join(INPUT_KINDS)}) and 'mutated'", start)

    # ------------------------------------------------------------------------------------------ values

    def value(self, c: Cursor) -> Value | None:
        """`f32[4, s0]{...}@cuda:0 offset=... requires_grad base=x`, `sym:i64`, or `?` for no record."""
        if c.take("?"):
            return None
        start, word = c.pos, c.ident("a type like f32[4] or sym:i64")
        vtype, dt = "tensor", word
        if c.take(":"):
            vtype, dt = word, c.ident("a dtype")
            if vtype not in VALUE_TYPES or vtype == "tensor":
                raise c.fail(f"unknown value type {vtype!r}; types are {', '.join(VALUE_TYPES[1:])}", start)
        if dt not in _SCHEMA_DTYPES:
            raise c.fail(f"unknown dtype {dt!r}", start)
        if vtype == "tensor":
            c.expect("[", "'[' and the sizes")
        shape = c.dims("]", INT64[1]) if vtype == "tensor" or c.take("[") else ()
        stride = c.dims("}", INT64[1]) if c.take("{") else row_major(shape)
        device = device_text(c) if c.take("@") else "cpu"
        value = Value(vtype, _SCHEMA_DTYPES[dt], shape, stride, device, *self.value_words(c))
        problem = layout_problem(value.shape, value.stride, value.storage_offset, self.hints)
        if problem is not None:
            raise c.fail(f"{problem[0]}: {problem[1]}", start)
        return value

    def value_words(self, c: Cursor) -> tuple[bool, str | None, int | str]:
        grad, base, offset, seen = False, None, 0, set()
        while True:
            c.spaces()
            start = c.pos
            if c.take("offset="):
                offset = c.sym() if c.take("sym(") else c.int_in(0, INT64[1], "an offset or sym(expr)")
            elif c.take_word("requires_grad"):
                grad = True
            elif c.take("base="):
                base = c.name()
            else:
                return grad, base, offset
            word = c.line[start:c.pos].partition("=")[0]
            if word in seen:
                raise c.fail(f"{word!r} given twice", start)
            seen.add(word)

    # ------------------------------------------------------------------------------------------ body

    def body(self, values: dict[str, Value], region: str | None):
        nodes: list[Node] = []
        constants: dict[str, Constant] = {}
        while True:
            c = self.required("'return (outputs)'")
            c.spaces()
            if c.peek() == ">" or c.take("... "):
                raise c.fail("a marked or shortened graph (from an error message) cannot be read back", 0)
            if self.is_return(c):
                return tuple(nodes), constants, self.outputs(c)
            item = self.statement(c, values, region)
            if isinstance(item, Node):
                nodes.append(item)
            elif item.name in constants:
                raise c.fail(f"constant {item.name!r} defined twice", 0)
            else:
                constants[item.name] = item

    @staticmethod
    def is_return(c: Cursor) -> bool:
        start = c.pos
        if c.take_word("return"):
            c.spaces()
            if c.peek() == "(":
                return True
        c.pos = start
        return False

    def statement(self, c: Cursor, values: dict[str, Value], region: str | None) -> Node | Constant:
        """A node line, `outs: types = op(args)  # notes`, or a constant line, `name: type = constant [data]`."""
        c.field = "outputs"
        starts, outs = [c.pos], [c.name()]
        while c.take(", "):
            starts.append(c.pos)
            outs.append(c.name())
        c.expect(": ")
        types = []
        while True:
            c.field = f"type of {outs[len(types)]}" if len(types) < len(outs) else "type"
            types.append(self.value(c))
            if not c.take(", "):
                break
        if len(types) != len(outs):
            raise c.fail(f"{len(outs)} output(s) but {len(types)} type(s)")
        c.spaces()
        c.expect("= ")
        if c.take_word("constant"):
            return self.constant(c, outs, types)
        c.field = "outputs"
        for out, value, start in zip(outs, types, starts):
            _define(c, values, out, value, start)
        op = self.op(c)
        args, kwargs = arguments(c)
        return Node(tuple(outs), op, tuple(args), kwargs, notes(c, region))

    @staticmethod
    def op(c: Cursor) -> str:
        c.field = "op"
        start, op = c.pos, c.match(WORD)
        if op is None:
            raise c.fail("expected an op name like aten.mul.Tensor")
        try:
            resolve_op(op)
        except GraphError as e:
            raise c.fail(str(e), start) from None
        c.expect("(")
        return op

    def outputs(self, c: Cursor) -> tuple[Output, ...]:
        c.field = "return"
        c.expect("(")
        outs: list[Output] = []
        while not c.take(")"):
            if outs:
                c.expect(", ", "', ' or ')'")
            c.field = f"outputs[{len(outs)}]"
            name, kind, index = c.name(), "user", None
            if c.take(" "):
                start, kind = c.pos, c.ident("an output kind")
                if kind not in OUTPUT_KINDS:
                    raise c.fail(f"unknown output kind {kind!r}; kinds are {', '.join(OUTPUT_KINDS)}", start)
                if c.take("["):
                    index = c.int_in(0, INT64[1], "an input index")
                    c.expect("]")
            outs.append(Output(name, kind, index))
        c.end()
        return tuple(outs)

    # ------------------------------------------------------------------------------------------ constants

    def constant(self, c: Cursor, outs: list[str], types: list[Value | None]) -> Constant:
        c.field = "constant"
        v = types[0]
        shape = v.shape if v is not None else ()
        if len(outs) != 1 or v is None or v != Value(dtype=v.dtype, shape=shape, stride=row_major(shape)) or \
                not all(isinstance(d, int) for d in shape):
            raise c.fail("a constant reads 'NAME: DTYPE[SIZES] = constant [DATA]', its sizes ints", 0)
        dtype = to_dtype(v.dtype)
        try:
            check_constant_shape(list(shape), "")
        except SchemaError as e:
            raise c.fail(e.what, 0) from None
        c.spaces()
        if c.take("[...]"):
            tensor = self.given_constant(c, outs[0], dtype, shape)
        else:
            tensor = constant_data(c, argument_list(c, 0), dtype, shape)
        c.end()
        return Constant(outs[0], tensor)

    def given_constant(self, c: Cursor, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        expected = type_text(dtype, shape)
        tensor = self.given.get(name)
        if tensor is None:
            raise c.fail(f"constant {name!r} ({expected}, {math.prod(shape)} elements) has no data in the text; "
                         f"pass its tensor in parse_graph(..., constants=)")
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tuple(tensor.shape) != shape:
            got = type_text(tensor.dtype, tuple(tensor.shape)) if isinstance(tensor, torch.Tensor) else "not a tensor"
            raise c.fail(f"the tensor given for constant {name!r} is {got}, expected {expected}")
        return tensor


def _define(c: Cursor, values: dict[str, Value], name: str, value: Value | None, start: int) -> None:
    if name in values:
        raise c.fail(f"value {name!r} is defined twice", start)
    if value is not None:
        values[name] = value
