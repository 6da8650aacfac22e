"""Drawing a laid-out diagram as inline SVG: boxes with one or two lines of text, curved edges, a legend.

Every string that reaches the SVG goes through `html.escape` (labels, tooltips, links): graph names and source
lines are the user's, and the SVG sits inside the report's HTML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from ._layout import layered_layout

CHAR_WIDTH = 6.6  # of the 11px monospace labels, for sizing boxes
LINE_HEIGHT = 14.0
PAD_X, PAD_Y = 8.0, 6.0
MAX_LABEL = 30  # characters of a label line; longer ones end with an ellipsis (the tooltip has everything)

# The arrow head every diagram's edges use: defined once per page, in a hidden SVG (ids are page-wide).
SVG_DEFS = ('<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
            '<marker id="ember-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
            'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#868e96"/></marker></defs></svg>')


@dataclass(frozen=True, slots=True)
class DiagramNode:
    """One box: `key` (unique in its diagram), text lines, a role (names its colour), a tooltip, a link."""

    key: str
    lines: tuple[str, ...]
    role: str
    tooltip: str = ""
    href: str | None = None
    rounded: bool = False  # inputs are drawn as pills


@dataclass
class Diagram:
    """Boxes in a topological order, edges (writer key, reader key), and a colour per role (with its legend)."""

    nodes: list[DiagramNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    colours: dict[str, str] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)  # role → words
    aliases: dict[str, str] = field(default_factory=dict)  # a node's later outputs → its key (edges start there)


def render_svg(diagram: Diagram, title: str) -> str:
    """The diagram as an `<svg>` element, sized to its layout (the page scrolls it)."""
    sizes = {n.key: _box_size(n) for n in diagram.nodes}
    keys = set(sizes)
    edges = [(a, b) for a, b in dict.fromkeys(diagram.edges) if a in keys and b in keys and a != b]
    layout = layered_layout([n.key for n in diagram.nodes], edges, sizes)
    legend_height = 22.0 if diagram.legend else 0.0
    width, height = max(layout.width, _legend_width(diagram)), layout.height + legend_height
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="diagram" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>"]
    parts += _legend(diagram)
    parts.append(f'<g transform="translate(0,{legend_height:.0f})">')
    parts += [_edge(layout.boxes[a], layout.boxes[b]) for a, b in edges]
    parts += [_box(n, layout.boxes[n.key], diagram.colours.get(n.role, "#f1f3f5")) for n in diagram.nodes]
    parts.append("</g></svg>")
    return "\n".join(parts)


def clip(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _box_size(node: DiagramNode) -> tuple[float, float]:
    longest = max((len(line) for line in node.lines), default=1)
    return longest * CHAR_WIDTH + 2 * PAD_X, len(node.lines) * LINE_HEIGHT + 2 * PAD_Y


def _edge(a, b) -> str:
    x1, y1, x2, y2 = a.x, a.bottom, b.x, b.top
    bend = max((y2 - y1) / 2, 12.0)
    return (f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} '
            f'{x2:.1f},{y2:.1f}" marker-end="url(#ember-arrow)"/>')


def _box(node: DiagramNode, box, fill: str) -> str:
    radius = box.height / 2 if node.rounded else 4
    left, top = box.x - box.width / 2, box.top
    shape = (f'<rect x="{left:.1f}" y="{top:.1f}" width="{box.width:.1f}" height="{box.height:.1f}" '
             f'rx="{radius:.1f}" fill="{escape(fill)}" class="role-{escape(node.role)}"/>')
    texts = []
    for k, line in enumerate(node.lines):
        y = top + PAD_Y + LINE_HEIGHT * (k + 0.75)
        cls = "label" if k == 0 else "label sub"
        texts.append(f'<text x="{box.x:.1f}" y="{y:.1f}" class="{cls}">{escape(line)}</text>')
    tooltip = f"<title>{escape(node.tooltip)}</title>" if node.tooltip else ""
    inner = f'<g class="node">{tooltip}{shape}{"".join(texts)}</g>'
    if node.href:
        return f'<a href="{escape(node.href)}">{inner}</a>'
    return inner


def _legend(diagram: Diagram) -> list[str]:
    parts, x = [], 12.0
    for role, words in diagram.legend.items():
        fill = diagram.colours.get(role, "#f1f3f5")
        parts.append(f'<rect x="{x:.0f}" y="4" width="14" height="14" rx="3" fill="{escape(fill)}" class="swatch"/>')
        parts.append(f'<text x="{x + 19:.0f}" y="15" class="legend">{escape(words)}</text>')
        x += 19 + len(words) * CHAR_WIDTH + 18
    return parts


def _legend_width(diagram: Diagram) -> float:
    return sum(37 + len(words) * CHAR_WIDTH for words in diagram.legend.values()) + 12
