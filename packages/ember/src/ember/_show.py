"""`ember show FILE`: any file `EMBER_DUMP` writes, told apart by its first line and its name, parsed by ember's own
readers (nothing in a file is evaluated) and printed for people.

- `.json`, or text starting `{`: a graph (JSON), printed in the graph's text form after `verify`;
- first line `# ember graph v...`, or any other `.txt`: a graph's text form, printed the same way;
- first line `# ember kernel plan`, or `NNN-kernels_planned-*.src.txt`: a kernel plan in loop IR, printed again
  after `parse_plan` (and `verify_plan`);
- any other dump `NNN-kind-name.src.txt`: a source (generated C++ or Python, guards, a partition report), as it is;
- `.dot`, or text starting `digraph` / `graph`: a Graphviz diagram, one line per node (its label, its role from the
  diagram's legend, the nodes it comes from);
- `.svg`, or text starting `<?xml` / `<svg`: the diagram drawn, described in a line (open it in a browser).

Anything else is a `ShowError` naming the file and saying what is wrong with it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ember_core import (
    EmberError,
    FileRefused,
    Graph,
    GraphError,
    format_graph,
    load,
    load_text,
    read_at_most,
    read_regular_file,
    regular_file,
    verify,
)

MAX_TEXT_BYTES = 64 << 20  # sources, plans and diagrams; graph files have their loaders' own limit
MAX_DOT_DEPTH = 32  # subgraphs nested deeper are refused
_SNIFF_BYTES = 4096
_DUMP_NAME = re.compile(r"\d{3,}-(?P<kind>[A-Za-z0-9_]+)-.*")
_FORMATS = ("a graph (.json, or text starting '# ember graph'), a kernel plan ('# ember kernel plan'), "
            "a dump's source (NNN-kind-name.src.txt), a Graphviz diagram (.dot) or its picture (.svg)")


class ShowError(EmberError):
    """A file `ember show` cannot read, with what is wrong; the message starts with the file's path."""


def show(path: str | Path, *, check: bool = True) -> str:
    """The readable text of one file ember wrote (without a final newline). `check=False` skips `verify` of graphs
    and `verify_plan` of plans."""
    path = Path(path)
    head = _head(path)
    return _READERS[file_format(path, head)](path, check)


def file_format(path: Path, head: bytes) -> str:
    """Which reader takes the file: by its first bytes where they tell, else by the name `EMBER_DUMP` gave it."""
    name, start = path.name, head.lstrip()
    first = start.split(b"\n", 1)[0]
    dump = _DUMP_NAME.fullmatch(name)
    if name.endswith(".svg") or start.startswith((b"<?xml", b"<svg")):
        return "svg"
    if path.suffix == ".json" or start.startswith(b"{"):
        return "graph-json"
    if first.startswith(b"# ember graph"):
        return "graph-text"
    if first.startswith(b"# ember kernel plan"):
        return "plan"
    if name.endswith(".dot") or re.match(rb"(?i)(strict\s+)?(di)?graph\b", start):
        return "dot"
    if dump and name.endswith(".src.txt"):
        return "plan" if dump["kind"] == "kernels_planned" else "source"
    if name.endswith(".txt"):
        return "graph-text"  # a graph's text form under another name: the parser says what is wrong
    raise ShowError(f"{path}: not a file ember writes; ember show reads {_FORMATS}")


def _head(path: Path) -> bytes:
    """The file's first bytes, after checking that it is a regular file (a fifo would block the read)."""
    if path.is_dir():
        raise ShowError(f"{path}: is a folder; ember show reads one file ({_FORMATS})")
    with _reading(path):
        with regular_file(path) as (fd, _):
            return read_at_most(fd, _SNIFF_BYTES)


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A file ember show will not read is a `ShowError` naming it."""
    try:
        yield
    except FileRefused as e:
        raise ShowError(f"{path}: {e}") from None


def _text(path: Path) -> str:
    """The whole file as UTF-8 text within `MAX_TEXT_BYTES`."""
    with _reading(path):
        data = read_regular_file(path, MAX_TEXT_BYTES)
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise ShowError(f"{path}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x})") from None
    if "\x00" in text:
        raise ShowError(f"{path}: not UTF-8 text (byte {text.index(chr(0))} is 0x00)")
    return text


# ---------------------------------------------------------------------------------------------- graphs, plans, sources


def _graph(path: Path, check: bool, read: Callable[[Path], Graph]) -> str:
    graph = read(path)
    if check:
        try:
            verify(graph)
        except GraphError as e:
            raise GraphError(f"{path}: {e}") from None
    return format_graph(graph)


def _plan(path: Path, check: bool) -> str:
    from ember_lowering import PlanError, format_plan, parse_plan, verify_plan

    text = _text(path)
    try:
        plan = parse_plan(text)
        if check:
            verify_plan(plan)
    except PlanError as e:
        raise ShowError(f"{path}: {e}") from None
    return format_plan(plan)


def _source(path: Path, check: bool) -> str:
    return _text(path).replace("\r\n", "\n").removesuffix("\n")


def _svg(path: Path, check: bool) -> str:
    """An SVG is a picture: say so (and where its DOT text is) rather than parse XML."""
    head = _head(path).lstrip()
    if not re.match(rb"(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*<svg[\s>]", head, re.S):
        raise ShowError(f"{path}: not an SVG image (it does not start with '<svg' or an XML declaration)")
    beside = path.with_suffix(".dot")
    source = f"; its Graphviz text: {beside} (ember show reads it)" if beside.is_file() else ""
    with _reading(path), regular_file(path) as (_, st):
        return f"SVG image, {st.st_size} bytes: open it in a browser{source}"


# ---------------------------------------------------------------------------------------------- Graphviz DOT


@dataclass
class DotGraph:
    """What `ember show` keeps of a DOT file: nodes in order of appearance with their attributes, and edges."""

    directed: bool
    name: str
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    legend: dict[str, str] = field(default_factory=dict)  # fill colour → word, from table cells of HTML labels


_DOT_TOKEN = re.compile(r"""
    (?P<skip>\s+|//[^\n]*|/\*.*?\*/|(?<![^\n])\#[^\n]*)
  | (?P<id>[A-Za-z_\x80-\U0010ffff][A-Za-z_0-9\x80-\U0010ffff]*|-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?))
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<edge>->|--)
  | (?P<punct>[{}\[\];,=:<])
""", re.X | re.S)


def parse_dot(text: str) -> DotGraph:
    """Read DOT text (Graphviz's grammar, less edges to subgraphs); `ValueError("line N: ...")` when it is not."""
    return _DotParser(text).graph()


class _DotParser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = self._tokens(text)
        self.at = 0
        self.dot = DotGraph(True, "")

    def _tokens(self, text: str) -> list[tuple[str, str, int]]:
        """(kind, text, offset) of each token; `html` for an `<...>` string, nested brackets included."""
        tokens, pos = [], 0
        while pos < len(text):
            m = _DOT_TOKEN.match(text, pos)
            if m is None:
                if text.startswith('"', pos):
                    raise self.fail("a quoted string is not closed", pos)
                if text.startswith("/*", pos):
                    raise self.fail("a /* comment is not closed", pos)
                raise self.fail(f"unexpected character {text[pos]!r}", pos)
            kind, value = m.lastgroup, m.group()
            if value == "<":
                end = self._html_end(pos)
                kind, value = "html", text[pos + 1:end - 1]
                tokens.append((kind, value, pos))
                pos = end
                continue
            if kind != "skip":
                tokens.append((kind, value, pos))
            pos = m.end()
        return tokens

    def _html_end(self, start: int) -> int:
        depth, pos = 0, start
        while pos < len(self.text):
            c = self.text[pos]
            depth += (c == "<") - (c == ">")
            pos += 1
            if depth == 0:
                return pos
        raise self.fail("an <...> label is not closed", start)

    def fail(self, what: str, pos: int | None = None) -> ValueError:
        if pos is None:  # the token at hand, or the end of the last line with text
            pos = self.tokens[self.at][2] if self.at < len(self.tokens) else len(self.text.rstrip())
        return ValueError(f"line {self.text.count(chr(10), 0, pos) + 1}: {what}")

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        if self.at >= len(self.tokens):
            raise self.fail("unexpected end of the file")
        self.at += 1
        return self.tokens[self.at - 1]

    def expect(self, value: str, where: str) -> None:
        if self.peek() != value:
            got = self.peek()
            raise self.fail(f"expected {value!r} {where}" + ("" if got is None else f", got {got!r}"))
        self.at += 1

    def ident(self, what: str) -> str:
        if self.at >= len(self.tokens):
            raise self.fail(f"expected {what} before the end of the file")
        kind, value, _ = self.tokens[self.at]
        if kind not in ("id", "string", "html"):
            raise self.fail(f"expected {what}, got {value!r}")
        self.at += 1
        if kind == "html":
            for colour, word in _LEGEND_CELL.findall(value):
                self.dot.legend[colour.lower()] = " ".join(word.split())
        return _unquote(kind, value)

    def graph(self) -> DotGraph:
        if (self.peek() or "").lower() == "strict":
            self.at += 1
        kind = (self.peek() or "").lower()
        if kind not in ("graph", "digraph"):
            raise self.fail("expected 'graph' or 'digraph'")
        self.at += 1
        name = self.ident("the graph's name") if self.peek() != "{" else ""
        self.dot.directed, self.dot.name = kind == "digraph", name
        self.expect("{", "after the graph's name")
        self.statements(depth=1)
        if self.at < len(self.tokens):
            raise self.fail(f"text after the graph's closing '}}': {self.peek()!r}")
        return self.dot

    def statements(self, depth: int) -> None:
        if depth > MAX_DOT_DEPTH:
            raise self.fail(f"subgraphs nested deeper than {MAX_DOT_DEPTH}")
        while self.peek() != "}":
            if self.peek() is None:
                raise self.fail("expected '}' before the end of the file")
            self.statement(depth)
            if self.peek() == ";":
                self.at += 1
        self.at += 1

    def statement(self, depth: int) -> None:
        word = (self.peek() or "").lower()
        if word == "subgraph" or word == "{":
            if word == "subgraph":
                self.at += 1
                if self.peek() != "{":
                    self.ident("the subgraph's name")
            self.expect("{", "to open the subgraph")
            self.statements(depth + 1)
            return
        if word in ("graph", "node", "edge") and self.tokens[self.at][0] == "id":
            self.at += 1
            self.attributes()
            return
        first = self.node_id()
        if self.peek() == "=":
            self.at += 1
            self.ident("a value after '='")
            return
        chain = [first]
        while self.peek() in ("->", "--"):
            op = self.take()[1]
            if (op == "->") != self.dot.directed:
                kind, other = ("an undirected", "--") if op == "->" else ("a directed", "->")
                raise self.fail(f"{op!r} in {kind} graph (use {other!r})", self.tokens[self.at - 1][2])
            if self.peek() in ("{", "subgraph"):
                raise self.fail("edges to subgraphs are not read by ember show")
            chain.append(self.node_id(f"a node name after {op!r}"))
        attrs = self.attributes()
        for name in chain:
            self.dot.nodes.setdefault(name, {})
        if len(chain) == 1:
            self.dot.nodes[first].update(attrs)
        self.dot.edges.extend(zip(chain, chain[1:]))

    def node_id(self, what: str = "a statement") -> str:
        name = self.ident(what)
        for _ in range(2):  # port and compass point: `a:p:n`
            if self.peek() != ":":
                break
            self.at += 1
            self.ident("a port after ':'")
        return name

    def attributes(self) -> dict[str, str]:
        attrs: dict[str, str] = {}
        while self.peek() == "[":
            self.at += 1
            while self.peek() != "]":
                key = self.ident("an attribute name or ']'")
                value = "true"
                if self.peek() == "=":
                    self.at += 1
                    value = self.ident(f"a value for attribute {key!r}")
                attrs[key] = value
                if self.peek() in (",", ";"):
                    self.at += 1
            self.at += 1
        return attrs


_LEGEND_CELL = re.compile(r'(?i)<td[^<>]*\bbgcolor="([^"<>]*)"[^<>]*>([^<>]+)</td>')


def _unquote(kind: str, value: str) -> str:
    if kind == "string":
        return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) in "nlr" else m.group(1), value[1:-1], flags=re.S)
    if kind == "html":  # the words of an HTML-like label, tags dropped
        return " ".join(re.sub(r"<[^<>]*>", " ", value).split())
    return value


def _dot(path: Path, check: bool) -> str:
    try:
        dot = parse_dot(_text(path))
    except ValueError as e:
        raise ShowError(f"{path}: {e}") from None
    arrow = "<-" if dot.directed else "--"
    sources: dict[str, list[str]] = {}
    for tail, head in dot.edges:
        sources.setdefault(head, []).append(tail)
    kind = "digraph" if dot.directed else "graph"
    lines = [f"{kind} {dot.name!r}: {len(dot.nodes)} nodes, {len(dot.edges)} edges"]
    width = max((len(_node_name(n)) for n in dot.nodes), default=0)
    for name, attrs in dot.nodes.items():
        label = " | ".join(part for part in attrs.get("label", name).split("\n") if part)
        line = f"  {_node_name(name).ljust(width)}  {label if label != name else ''}"
        role = dot.legend.get(attrs.get("fillcolor", "").lower())
        if role:
            line += f"  [{role}]"
        if name in sources:
            line += f"  {arrow} {', '.join(map(_node_name, sources[name]))}"
        lines.append(line.rstrip())
    return "\n".join(lines)


def _node_name(name: str) -> str:
    """A node's name on its one line: quoted when it is empty or holds a line break or tab (DOT allows both)."""
    return name if name and not any(c.isspace() and c != " " for c in name) else json.dumps(name)


_READERS: dict[str, Callable[[Path, bool], str]] = {
    "graph-json": lambda path, check: _graph(path, check, load),
    "graph-text": lambda path, check: _graph(path, check, load_text),
    "plan": _plan,
    "source": _source,
    "dot": _dot,
    "svg": _svg,
}
