"""Where each box of a graph diagram goes: a layered drawing of a DAG, computed in pure Python (no Graphviz).

networkx (a dependency of torch, so already installed) holds the DAG and gives its layers
(`topological_generations`: a node sits one layer below the deepest node it reads). An input is then moved down
to just above its first reader, so that a weight read late does not send an edge across the whole picture. Each
layer is ordered by the barycenter heuristic (a few sweeps down and up, each node at the mean x of its
neighbours in the layers already placed), then packed left to right and centred.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LAYER_GAP = 34.0  # vertical space between the bottom of one layer and the top of the next
BOX_GAP = 14.0  # horizontal space between boxes of one layer
MARGIN = 12.0
SWEEPS = 4


@dataclass(frozen=True, slots=True)
class Box:
    """A laid-out box: its centre, width and height."""

    x: float
    y: float
    width: float
    height: float

    @property
    def top(self) -> float:
        return self.y - self.height / 2

    @property
    def bottom(self) -> float:
        return self.y + self.height / 2


@dataclass(frozen=True, slots=True)
class Layout:
    boxes: dict[str, Box]
    width: float
    height: float


def layered_layout(nodes: Sequence[str], edges: Sequence[tuple[str, str]], sizes: Mapping[str, tuple[float, float]]
                   ) -> Layout:
    """Boxes for `nodes` (in a topological order) joined by `edges` (reader after writer); `sizes[n]` is the
    (width, height) of node n's box."""
    layers = _layers(nodes, edges)
    preds, succs = _neighbours(nodes, edges)
    rows = _order(layers, preds, succs, sizes)
    return _place(rows, sizes)


def _layers(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    import networkx as nx  # noqa: PLC0415 - only a report draws diagrams; ember_core imports fast without it

    dag = nx.DiGraph()
    dag.add_nodes_from(nodes)
    dag.add_edges_from(edges)
    depth = {n: d for d, generation in enumerate(nx.topological_generations(dag)) for n in generation}
    for n in nodes:
        readers = list(dag.successors(n))
        if dag.in_degree(n) == 0 and readers:
            depth[n] = max(min(depth[r] for r in readers) - 1, 0)
    rows: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in nodes:  # topological order within a layer: the starting order of the sweeps
        rows[depth[n]].append(n)
    return rows


def _neighbours(nodes: Sequence[str], edges: Sequence[tuple[str, str]]
                ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    succs: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succs[a].append(b)
        preds[b].append(a)
    return preds, succs


def _order(rows: list[list[str]], preds: dict[str, list[str]], succs: dict[str, list[str]],
           sizes: Mapping[str, tuple[float, float]]) -> list[list[str]]:
    """Barycenter sweeps: down (by readers' writers), then up (by writers' readers)."""
    for sweep in range(SWEEPS):
        xs = _centres(rows, sizes)
        order = range(1, len(rows)) if sweep % 2 == 0 else range(len(rows) - 2, -1, -1)
        links = preds if sweep % 2 == 0 else succs
        for k in order:
            rows[k] = sorted(rows[k], key=lambda n, xs=xs, links=links: _barycentre(n, links[n], xs))
            xs.update(_row_centres(rows[k], sizes, _widest(rows, sizes)))
    return rows


def _barycentre(node: str, neighbours: list[str], xs: dict[str, float]) -> float:
    known = [xs[m] for m in neighbours if m in xs]
    return sum(known) / len(known) if known else xs.get(node, 0.0)


def _widest(rows: list[list[str]], sizes: Mapping[str, tuple[float, float]]) -> float:
    return max((_row_width(r, sizes) for r in rows), default=0.0)


def _row_width(row: list[str], sizes: Mapping[str, tuple[float, float]]) -> float:
    return sum(sizes[n][0] for n in row) + BOX_GAP * max(len(row) - 1, 0)


def _row_centres(row: list[str], sizes: Mapping[str, tuple[float, float]], widest: float) -> dict[str, float]:
    """x of each box's centre: the row packed left to right, centred under the widest row."""
    x = MARGIN + (widest - _row_width(row, sizes)) / 2
    centres = {}
    for n in row:
        w = sizes[n][0]
        centres[n] = x + w / 2
        x += w + BOX_GAP
    return centres


def _centres(rows: list[list[str]], sizes: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    widest = _widest(rows, sizes)
    return {n: x for row in rows for n, x in _row_centres(row, sizes, widest).items()}


def _place(rows: list[list[str]], sizes: Mapping[str, tuple[float, float]]) -> Layout:
    xs = _centres(rows, sizes)
    boxes: dict[str, Box] = {}
    y = MARGIN
    for row in rows:
        height = max((sizes[n][1] for n in row), default=0.0)
        for n in row:
            boxes[n] = Box(xs[n], y + height / 2, *sizes[n])
        y += height + LAYER_GAP
    width = _widest(rows, sizes) + 2 * MARGIN
    return Layout(boxes, width, max(y - LAYER_GAP + MARGIN, 2 * MARGIN))
