"""One compile's part of the page: its stages' times, its graphs as text and diagrams, the partition, and per
compiled graph its kernels (linked to graph nodes and the user's source lines), plan, generated code and wrapper.

A compile's HTML is kept and made again only when the compile changed (`Compile.version`); diagrams are kept per
graph, since a graph never changes once reported."""

from __future__ import annotations

from typing import Any

from ..graph._schema import Graph
from ._diagrams import captured_diagram, kernel_diagram, partition_diagram
from ._html import Anchors, code, details, esc, link, seconds, step_anchors, table
from ._model import Compile, Compiled
from ._sources import SourceLines
from ._svg import Diagram, render_svg
from ._timing import stage_bars, stage_rows

MAX_DIAGRAM_NODES = 600  # larger graphs are shown as text only (a picture of thousands of boxes helps nobody)
LANGUAGES = {"codegen-cpp": "C++", "codegen-triton": "Triton"}


class SourceIndex:
    """The user's source lines that graph nodes came from, with an id each and the kernels made from them."""

    def __init__(self) -> None:
        self.lines = SourceLines()
        self.ids: dict[str, str] = {}  # "model.py:12" → "src-3"
        self.users: dict[str, dict[int, list[tuple[str, str]]]] = {}  # where → compile → [(href, text)]

    def id_of(self, where: str) -> str:
        if where not in self.ids:
            self.ids[where] = f"src-{len(self.ids) + 1}"
            self.users[where] = {}
        return self.ids[where]

    def forget(self, number: int) -> None:
        """Drop what compile `number` said it uses (it is about to be rendered again)."""
        for users in self.users.values():
            users.pop(number, None)

    def use(self, where: str, number: int, href: str, text: str) -> str:
        """The id of `where`'s entry, noting that compile `number` made `text` (at `href`) from it."""
        sid = self.id_of(where)
        self.users[where].setdefault(number, []).append((href, text))
        return sid


class CompileRenderer:
    """HTML of compiles, kept by version."""

    def __init__(self, sources: SourceIndex) -> None:
        self.sources = sources
        self._html: dict[int, tuple[int, str]] = {}
        self._svg: dict[tuple[int, str], str] = {}

    def render(self, c: Compile) -> str:
        kept = self._html.get(c.number)
        if kept is not None and kept[0] == c.version:
            return kept[1]
        self.sources.forget(c.number)
        html = self._section(c)
        self._html[c.number] = (c.version, html)
        return html

    def _section(self, c: Compile) -> str:
        kind = "training" if c.training else "inference"
        codegens = sorted({g.codegen for g in c.graphs.values() if g.codegen})
        badges = f'<span class="badge">{kind}</span>' + "".join(f'<span class="badge">{esc(x)}</span>'
                                                                for x in codegens)
        parts = [f'<section class="compile" id="c{c.number}">',
                 f"<h2>#{c.number} {esc(c.name)}{badges}</h2>", self._summary(c), _notes(c.notes),
                 details("Compile time per stage", stage_bars(c) + table(("stage", "graph", "time"), stage_rows(c)))]
        if c.captured is not None:
            parts.append(self._graph_block(c, "captured", "Captured graph", c.captured, f"c{c.number}-cap",
                                           lambda a: captured_diagram(c.captured, a.href), open_=True))
        if c.passes:
            rows = [(esc(e.data.get("pass", "")), esc(e.data.get("point", "")),
                     f'{e.data.get("nodes_before", "?")} → {e.data.get("nodes_after", "?")}',
                     seconds(e.data.get("seconds"))) for e in c.passes]
            parts.append(details("Graph passes applied", table(("pass", "point", "nodes", "time"), rows)))
        if c.joint is not None:
            parts.append(details(f"Joint graph ({len(c.joint.graph.nodes)} nodes, autograd "
                                 f"<code>{esc(c.autograd)}</code>)", Anchors(f"c{c.number}-joint", c.joint.graph)
                                 .text()))
        if c.partition is not None:
            parts.append(self._partition(c))
        for m, g in enumerate(c.graphs.values(), start=1):
            parts.append(self._compiled(c, m, g))
        parts.append("</section>")
        return "\n".join(parts)

    def _summary(self, c: Compile) -> str:
        steps = [s for g in c.graphs.values() for s in g.steps]
        kernels = sum(1 for s in steps if s.get("kind") == "kernel")
        nodes = len(c.captured.nodes) if c.captured is not None else 0
        return (f'<p class="muted">{nodes} nodes captured · {len(c.graphs)} compiled graphs · {kernels} kernels · '
                f"{len(steps) - kernels} extern calls · {seconds(c.total_seconds())} compiling</p>")

    def _graph_block(self, c: Compile, key: str, title: str, graph: Graph, prefix: str, make, open_=False) -> str:
        anchors = Anchors(prefix, graph)
        body = self._diagram(c, key, graph, lambda: make(anchors)) + details("Text", anchors.text())
        return details(f"{esc(title)} <code>{esc(graph.name)}</code> ({len(graph.nodes)} nodes)", body, open_=open_)

    def _diagram(self, c: Compile, key: str, graph: Graph, make) -> str:
        if len(graph.nodes) > MAX_DIAGRAM_NODES:
            return f'<p class="empty">No diagram: {len(graph.nodes)} nodes (more than {MAX_DIAGRAM_NODES}).</p>'
        cached = self._svg.get((c.number, key))
        if cached is None:
            diagram: Diagram = make()
            cached = self._svg[(c.number, key)] = render_svg(diagram, f"{key} of {graph.name}")
        return f'<div class="scroll" id="c{c.number}-{esc(key)}-diagram">{cached}</div>'

    def _partition(self, c: Compile) -> str:
        part, joint = c.partition, c.joint
        backward = _prefix_of(c, part.backward.name)
        if joint is None:  # reused from a cache: the joint graph was never traced in this process
            body = (f'<p class="muted">Reused from {esc(c.partitioner)}: a warm start skips the joint trace and the '
                    "partitioner, so there is no joint graph to draw; both halves are below.</p>")
        else:
            body = self._diagram(c, "partition", joint.graph, lambda: partition_diagram(
                joint, part, Anchors(f"c{c.number}-joint", joint.graph).href, Anchors(backward, part.backward).href))
        saved = ", ".join(f"<code>{esc(s)}</code>" for s in part.saved) or "none"
        body += f"<p>Saved for the backward ({len(part.saved)}): {saved}</p>"
        if c.partition_report:
            body += details("Partition report", code(c.partition_report), open_=True)
        by = "from" if joint is None else "by"
        return details(f"Partition {by} <code>{esc(c.partitioner)}</code>: forward "
                       f"{len(part.forward.nodes)} nodes, backward {len(part.backward.nodes)} nodes", body,
                       open_=True)

    def _compiled(self, c: Compile, m: int, g: Compiled) -> str:
        prefix = f"c{c.number}-g{m}"
        graph = g.graph or _partition_graph(c, g.name)
        title = f'{esc(g.role)} graph <code>{esc(g.name)}</code>'
        title += f' <span class="badge">{esc(g.codegen)}</span>' if g.codegen else ""
        parts = [f'<h3 id="{prefix}">{title}</h3>', _notes(g.notes)]
        anchors = Anchors(prefix, graph) if graph is not None else None
        parts.append(self._kernels(c, g, prefix, anchors))
        if graph is not None and g.steps:
            parts.append(details("Diagram, coloured by kernel", self._diagram(
                c, f"g{m}-kernels", graph, lambda: kernel_diagram(graph, g.steps, anchors.href))))
        if anchors is not None:
            parts.append(details(f"Graph text ({len(graph.nodes)} nodes)", anchors.text()))
        parts.append(_texts(g, prefix))
        return "\n".join(parts)

    def _kernels(self, c: Compile, g: Compiled, prefix: str, anchors: Anchors | None) -> str:
        if not g.steps:
            why = "its kernel plan came from the disk cache" if g.plan is None and g.unit else "no kernel plan"
            return f'<p class="empty">No kernel table: {why}.</p>'
        nodes = _source_nodes(c, anchors.graph) if anchors is not None else {}
        rows = [self._kernel_row(c, g, prefix, anchors, nodes, k, step) for k, step in enumerate(g.steps)]
        ids = [f"{prefix}-r{k}" for k in range(len(rows))]
        return table(("#", "step", "name", "sizes", "computes", "from source"), rows, cls="kernels", ids=ids)

    def _kernel_row(self, c: Compile, g: Compiled, prefix: str, anchors: Anchors | None, nodes: dict[str, Any],
                    k: int, step: dict[str, Any]) -> tuple[str, ...]:
        """One step: its plan line, kind, name, sizes, the graph nodes it computes and their source lines."""
        origins, sources = [], []
        for name in step.get("origins", ()):
            href = anchors.href(name) if anchors is not None else None
            origins.append(link(href[1:], name) if href else f"<code>{esc(name)}</code>")
            node = nodes.get(name)
            where = node.meta.get("source") if node is not None else None
            if where and where not in [w for w, _ in sources]:
                sources.append((where, node.meta.get("module", "")))
        cells = []
        for where, module in sources:
            sid = self.sources.use(where, c.number, f"{prefix}-r{k}", f"#{c.number} {g.role} {step.get('name')}")
            cells.append(link(sid, where) + (f' <span class="muted">{esc(module)}</span>' if module else ""))
        return (link(f"{prefix}-s{k}", str(k)), esc(step.get("kind", "")), f"<code>{esc(step.get('name', ''))}</code>",
                f"<code>{esc(step.get('sizes', ''))}</code>", ", ".join(origins), "<br>".join(cells))


def _texts(g: Compiled, prefix: str) -> str:
    parts = []
    if g.plan:
        parts.append(details("Kernel plan (loop IR)", code(g.plan, step_anchors(g.plan, prefix))))
    if g.decisions:
        items = "".join(f"<li><code>{esc(d)}</code></li>" for d in g.decisions)
        parts.append(details(f"Scheduler decisions ({len(g.decisions)})", f"<ul>{items}</ul>"))
    language = LANGUAGES.get(g.stage, g.stage or "generated")
    if g.unit:
        parts.append(details(f"Generated {esc(language)} source", code(g.unit)))
    if g.wrapper:
        parts.append(details("Python wrapper", code(g.wrapper)))
    if g.source and not (g.unit or g.wrapper):
        parts.append(details(f"Generated source ({esc(g.codegen or 'codegen')})", code(g.source)))
    return "\n".join(parts)


def _source_nodes(c: Compile, graph: Graph) -> dict[str, Any]:
    """Output name → the node whose `source` and `module` a kernel computing it shows. ember-autograd's joint trace
    carries each captured node's lines to what its forward and backward record; a node without one (another
    autograd plugin's, or a partition cached by an older ember) takes its captured node's: the node of the same name
    and op (a joint's forward replays the captured graph's ops in order, and names them as capture did)."""
    found = {o: n for n in graph.nodes for o in n.outputs}
    if c.captured is None or graph is c.captured:
        return found
    captured = {o: n for n in c.captured.nodes for o in n.outputs}
    for name, node in found.items():
        twin = captured.get(name)
        if "source" not in node.meta and twin is not None and twin.op == node.op and "source" in twin.meta:
            found[name] = twin
    return found


def _notes(notes: list[str]) -> str:
    return "".join(f'<div class="note">{esc(n)}</div>' for n in notes)


def _prefix_of(c: Compile, name: str) -> str:
    names = list(c.graphs)
    return f"c{c.number}-g{names.index(name) + 1}" if name in names else f"c{c.number}-x"


def _partition_graph(c: Compile, name: str) -> Graph | None:
    if c.partition is None:
        return None
    return {c.partition.forward.name: c.partition.forward, c.partition.backward.name: c.partition.backward}.get(name)
