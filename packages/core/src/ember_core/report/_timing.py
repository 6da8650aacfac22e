"""Compile time per stage, from the `seconds` the stages' events carry: a table and stacked bars (inline SVG).

A compile's own stages are capture, passes, autograd and partition; each graph it compiled adds lowering, codegen
(printing kernels and wrapper), the rest of the codegen's `compile` call, and the build (which runs in the
background until the graph's first call, so it can overlap the others)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ._html import esc, seconds
from ._model import Compile

COLOURS = {"capture": "#4dabf7", "passes": "#74c0fc", "autograd": "#9775fa", "partition": "#e599f7",
           "lowering": "#69db7c", "codegen": "#ffd43b", "codegen, other": "#ffe8a1", "build": "#ff8787"}
BAR_WIDTH = 640.0
LABEL_WIDTH = 190.0

Segment = tuple[str, str, float]  # (stage, graph or "", seconds)


def segments(c: Compile) -> list[Segment]:
    found: list[Segment] = [(stage, "", c.seconds[stage]) for stage in ("capture", "passes", "autograd", "partition")
                            if stage in c.seconds]
    for g in c.graphs.values():
        times = g.seconds
        for stage in ("lowering", "codegen"):
            if stage in times:
                found.append((stage, g.name, times[stage]))
        if "compile" in times:
            rest = times["compile"] - times.get("lowering", 0.0) - times.get("codegen", 0.0)
            found.append(("codegen, other", g.name, max(rest, 0.0)))
        if "build" in times:
            found.append(("build", g.name, times["build"]))
    return found


def stage_rows(c: Compile) -> list[tuple[str, str, str]]:
    rows = [(esc(stage), f"<code>{esc(graph)}</code>" if graph else "", seconds(s)) for stage, graph, s in segments(c)]
    total = sum(s for _, _, s in segments(c))
    return [*rows, ("<b>total</b>", "", f"<b>{seconds(total)}</b>")] if rows else [("–", "", "no times reported")]


def stage_bars(c: Compile) -> str:
    return bars_svg([(f"#{c.number} {c.name}", segments(c))])


def bars_svg(rows: Sequence[tuple[str, list[Segment]]]) -> str:
    """One stacked bar per row, on a common scale, with a legend of the stages present."""
    longest = max((sum(s for _, _, s in segs) for _, segs in rows), default=0.0) or 1.0
    scale = BAR_WIDTH / longest
    height = 22 * len(rows) + 26
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="bars" width="{LABEL_WIDTH + BAR_WIDTH + 80:.0f}" '
             f'height="{height}" role="img" aria-label="compile time per stage">']
    present: list[str] = []
    for k, (label, segs) in enumerate(rows):
        y = 4 + 22 * k
        parts.append(f'<text x="4" y="{y + 13}">{esc(_clip(label))}</text>')
        x = LABEL_WIDTH
        for stage, graph, s in segs:
            w = s * scale
            tip = f"{stage}{' of ' + graph if graph else ''}: {seconds(s)}"
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="16" '
                         f'fill="{COLOURS.get(stage, "#ced4da")}"><title>{escape(tip)}</title></rect>')
            x += w
            present += [stage] if stage not in present else []
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 13}">{esc(seconds(sum(s for _, _, s in segs)))}</text>')
    x = 4.0
    for stage in present:
        y = 22 * len(rows) + 8
        parts.append(f'<rect x="{x:.0f}" y="{y}" width="12" height="12" fill="{COLOURS[stage]}"/>')
        parts.append(f'<text x="{x + 16:.0f}" y="{y + 10}">{esc(stage)}</text>')
        x += 26 + 6.5 * len(stage)
    parts.append("</svg>")
    return "\n".join(parts)


def _clip(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
