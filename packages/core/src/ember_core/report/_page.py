"""The whole report page: header, summary, time per compile, each compile's section, the user's source lines,
guards and recompiles, graph breaks, fallbacks, caches, and every event in order. One self-contained HTML file."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from ..events import break_site
from ._assets import CSS, SCRIPT, content_policy
from ._html import code, details, esc, link, seconds, table
from ._model import LogEntry, Report
from ._sections import CompileRenderer, SourceIndex
from ._svg import SVG_DEFS
from ._timing import bars_svg, segments

GENERATOR = "ember-report 1"  # the page's <meta name="generator">: how `ember report` knows its files
GUARD_KINDS = ("guards_built", "guard_failed", "recompiled")
CACHE_KINDS = ("graph_cache_hit", "graph_cache_miss", "build_cache_hit", "build_cache_miss", "disk_cache_hit",
               "disk_cache_miss")


@dataclass(frozen=True, slots=True)
class PageInfo:
    """Who the report is about: the program (its command line), process id, when it started, versions."""

    program: str
    pid: int
    started: float
    versions: str


class PageRenderer:
    """Renders a `Report`; keeps each compile's HTML until that compile changes."""

    def __init__(self) -> None:
        self.sources = SourceIndex()
        self.compiles = CompileRenderer(self.sources)

    def render(self, report: Report, info: PageInfo) -> str:
        compiles = [self.compiles.render(c) for c in report.compiles]  # first: they fill the source index
        body = [self._summary(report), *compiles, self._sources(), _guards(report.log), _breaks(report.log),
                _fallbacks(report.log), _caches(report.log), _events(report)]
        return _shell(report, info, "\n".join(body))

    def _summary(self, report: Report) -> str:
        counts = report.counts()
        steps = [s for c in report.compiles for g in c.graphs.values() for s in g.steps]
        kernels = sum(1 for s in steps if s.get("kind") == "kernel")
        total = sum(c.total_seconds() for c in report.compiles)
        cards = [(len(report.compiles), "compiles (captured graphs)"),
                 (sum(len(c.graphs) for c in report.compiles), "compiled graphs"), (kernels, "kernels"),
                 (len(steps) - kernels, "extern calls"), (seconds(total), "compiling, all stages"),
                 (counts.get("recompiled", 0), "recompiles"), (len(distinct_breaks(report.log)), "graph breaks"),
                 (counts.get("fallback", 0), "fallbacks")]
        html = '<section id="summary"><h2>Summary</h2><div class="cards">'
        html += "".join(f"<div class=\"card\"><b>{esc(v)}</b><span>{esc(k)}</span></div>" for v, k in cards)
        html += "</div>"
        if report.compiles:
            html += bars_svg([(f"#{c.number} {c.name}", segments(c)) for c in report.compiles])
        else:
            html += '<p class="empty">Nothing compiled yet.</p>'
        return html + "</section>"

    def _sources(self) -> str:
        index = self.sources
        rows = []
        for where, sid in index.ids.items():
            text = index.lines.line(where)
            users = [link(href, label) for uses in index.users[where].values() for href, label in uses]
            rows.append((f'<span id="{esc(sid)}"><code>{esc(where)}</code></span>',
                         f"<code>{esc(text)}</code>" if text else '<span class="muted">not found</span>',
                         ", ".join(users)))
        if not rows:
            return '<section id="sources"><h2>Source lines</h2><p class="empty">No kernel named a source line.</p>' \
                   "</section>"
        return ('<section id="sources"><h2>Source lines</h2><p class="muted">Each line of your code that graph nodes '
                "came from, and the kernels that compute them.</p>" + table(("where", "code", "kernels"), rows)
                + "</section>")


def _shell(report: Report, info: PageInfo, body: str) -> str:
    started = datetime.datetime.fromtimestamp(info.started).strftime("%Y-%m-%d %H:%M:%S")
    updated = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    nav = "".join(link(f"c{c.number}", f"#{c.number} {c.name}") for c in report.compiles[:200])
    nav += "".join(link(a, t) for a, t in (("sources", "source lines"), ("guards", "guards"), ("breaks", "breaks"),
                                           ("fallbacks", "fallbacks"), ("caches", "caches"), ("events", "events")))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{esc(content_policy())}">
<meta name="generator" content="{GENERATOR}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ember report: {esc(info.program)} (pid {info.pid})</title>
<style>{CSS}</style></head>
<body>{SVG_DEFS}
<header><h1>ember compile report</h1><div class="meta"><code>{esc(info.program)}</code> · pid {info.pid} · started
{esc(started)} · updated {esc(updated)} · {esc(info.versions)}</div></header>
<nav><a href="#summary">summary</a>{nav}<button type="button" data-details="open">expand all</button>
<button type="button" data-details="close">collapse all</button></nav>
<main>
{body}
</main>
<script>{SCRIPT}</script>
</body></html>
"""


def distinct_breaks(log: list[LogEntry]) -> list[LogEntry]:
    """The first report of each graph break (`break_site`): a recompile of the frame reports its breaks again."""
    first: dict[tuple, LogEntry] = {}
    for e in _entries(log, ("graph_break",)):
        first.setdefault(break_site(e.message, dict(e.data)), e)
    return list(first.values())


def _entries(log: list[LogEntry], kinds: Iterable[str]) -> list[LogEntry]:
    kinds = set(kinds)
    return [e for e in log if e.kind in kinds]


def _compile_link(entry: LogEntry) -> str:
    return link(f"c{entry.compile}", f"#{entry.compile}") if entry.compile is not None else ""


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{body}</section>'


def _guards(log: list[LogEntry]) -> str:
    entries = _entries(log, GUARD_KINDS)
    if not entries:
        return _section("guards", "Guards and recompiles", '<p class="empty">No guards reported.</p>')
    parts = []
    for e in entries:
        head = f"<code>{esc(e.kind)}</code> at {e.at:.2f} s: {esc(e.message)}"
        parts.append(details(head, code(e.source)) if e.source else f"<p>{head}</p>")
    return _section("guards", "Guards and recompiles", "\n".join(parts))


def _breaks(log: list[LogEntry]) -> str:
    rows = [(f"{e.at:.2f} s", f"<pre class=\"code\">{esc(e.message)}</pre>") for e in distinct_breaks(log)]
    body = table(("when", "where and why"), rows) if rows else '<p class="empty">No graph breaks.</p>'
    return _section("breaks", "Graph breaks", body)


def _fallbacks(log: list[LogEntry]) -> str:
    rows = [(_compile_link(e), esc(e.stage), f"<code>{esc(dict(e.data).get('cause', ''))}</code>", esc(e.message))
            for e in _entries(log, ("fallback",))]
    body = table(("compile", "stage", "cause", "what runs a slower way"), rows) if rows else \
        '<p class="empty">No fallbacks: everything ran as compiled.</p>'
    return _section("fallbacks", "Fallbacks", body)


def _caches(log: list[LogEntry]) -> str:
    rows = [(_compile_link(e), f"<code>{esc(e.kind)}</code>", esc(e.message)) for e in _entries(log, CACHE_KINDS)]
    body = table(("compile", "kind", "what"), rows) if rows else '<p class="empty">No cache lookups reported.</p>'
    return _section("caches", "Caches", body)


def _events(report: Report) -> str:
    rows = [(f"{e.at:.3f}", _compile_link(e), f"<code>{esc(e.kind)}</code>", esc(e.stage),
             seconds(e.seconds) if e.seconds is not None else "", f'<span class="msg">{esc(e.message)}</span>')
            for e in report.log]
    body = table(("at (s)", "compile", "kind", "stage", "took", "message"), rows, cls="events")
    if report.dropped:
        body += f'<p class="muted">{report.dropped} later events are left out.</p>'
    return _section("events", f"Events ({len(report.log) + report.dropped})", details("Every event, in order", body))
