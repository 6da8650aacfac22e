"""Small HTML pieces of the report. Every text goes through `esc` (html.escape, quotes included) before it reaches
the page; ids are made by ember (`c3-g1-v12`), never from names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape

from ..graph._printer import default_region, format_node
from ..graph._schema import Graph

MAX_TEXT = 400_000  # characters of one text block; a longer one is cut, saying where


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def details(summary: str, body: str, *, open_: bool = False, cls: str = "") -> str:
    """A collapsible block; `summary` and `body` are HTML already."""
    attrs = (' open' if open_ else '') + (f' class="{esc(cls)}"' if cls else '')
    return f"<details{attrs}><summary>{summary}</summary>{body}</details>"


def code(text: str, anchors: Mapping[int, str] | None = None, cls: str = "code") -> str:
    """Text as a `<pre>`, line k wrapped in `<span id=anchors[k]>` where given (links land on it)."""
    cut = ""
    if len(text) > MAX_TEXT:
        cut = f"\n… {len(text) - MAX_TEXT:,} more characters left out of the report"
        text = text[:MAX_TEXT]
    anchors = anchors or {}
    lines = []
    for k, line in enumerate(text.split("\n")):
        if k in anchors:
            lines.append(f'<span class="ln" id="{esc(anchors[k])}">{esc(line)}</span>')
        else:
            lines.append(esc(line))
    return f'<pre class="{esc(cls)}">' + "\n".join(lines) + esc(cut) + "</pre>"


def table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "", ids: Sequence[str] = ()) -> str:
    """A table; `head` is plain text, each row's cells are HTML already; `ids[k]` is row k's id (links land on
    it)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = []
    for k, row in enumerate(rows):
        attr = f' id="{esc(ids[k])}"' if k < len(ids) else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return f'<table class="{esc(cls)}"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def link(href: str, text: str) -> str:
    return f'<a href="#{esc(href)}">{esc(text)}</a>'


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


class Anchors:
    """Ids for one graph's text and diagram: `href(name)` of a value's line (an input's: the header line)."""

    def __init__(self, prefix: str, graph: Graph) -> None:
        self.prefix = prefix
        self.graph = graph
        self.index: dict[str, int] = {}
        for inp in graph.inputs:
            self.index.setdefault(inp.name, 0)
        for k, node in enumerate(graph.nodes, start=1):
            for o in node.outputs:
                self.index.setdefault(o, k)

    def id_of(self, k: int) -> str:
        return f"{self.prefix}-n{k}"

    def href(self, name: str) -> str | None:
        k = self.index.get(name)
        return None if k is None else "#" + self.id_of(k)

    def text(self) -> str:
        """The graph's text (`str(graph)`), its header and node lines anchored."""
        text = str(self.graph)
        region = default_region(self.graph)
        node_lines = {format_node(n, self.graph.values, region).strip(): k
                      for k, n in enumerate(self.graph.nodes, start=1)}
        anchors: dict[int, str] = {}
        for i, line in enumerate(text.split("\n")):
            stripped = line.strip()
            if stripped.startswith("def ") and not anchors:
                anchors[i] = self.id_of(0)
            elif stripped in node_lines:
                anchors[i] = self.id_of(node_lines.pop(stripped))
        return code(text, anchors, "code graph")


def step_anchors(plan: str, prefix: str) -> dict[int, str]:
    """Line k of a plan's text → the id of step s, for each `kernel ...` / `extern ...` line (steps in order)."""
    anchors, step = {}, 0
    for k, line in enumerate(plan.split("\n")):
        if line.lstrip().startswith(("kernel ", "extern ")):
            anchors[k] = f"{prefix}-s{step}"
            step += 1
    return anchors
