"""Max-flow min-cut on a small directed network with integer capacities: Dinic's algorithm, iterative.

Exact on Python ints of any size. `None` is an infinite capacity; edges added twice add up. A cut that would have
to cross an infinite edge is a `GraphError` naming the path of infinite edges that forces it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from ember_core import GraphError


@dataclass(frozen=True, slots=True)
class Cut:
    """A minimum s-t cut: its value, the vertices on the source side, and the edges it crosses (in added order)."""

    value: int
    source_side: frozenset
    edges: tuple[tuple[Hashable, Hashable], ...]


class FlowNetwork:
    """A directed network. Capacities are non-negative ints; `None` means infinite (the edge can never be cut)."""

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self._caps: dict[tuple[int, int], int | None] = {}

    def _id(self, vertex: Hashable) -> int:
        return self._ids.setdefault(vertex, len(self._ids))

    def add_edge(self, u: Hashable, v: Hashable, capacity: int | None) -> None:
        if capacity is not None and capacity < 0:
            raise ValueError(f"edge {u!r} -> {v!r}: capacity {capacity} is negative")
        key = (self._id(u), self._id(v))
        if key in self._caps:
            old = self._caps[key]
            capacity = None if old is None or capacity is None else old + capacity
        self._caps[key] = capacity

    @property
    def vertices(self) -> int:
        return len(self._ids)

    @property
    def edges(self) -> int:
        return len(self._caps)

    def min_cut(self, source: Hashable, sink: Hashable) -> Cut:
        """The minimum cut between `source` and `sink`; `GraphError` when every cut is infinite."""
        s, t = self._id(source), self._id(sink)
        infinite = sum(c for c in self._caps.values() if c is not None) + 1
        residual = _Residual(len(self._ids), ((u, v, infinite if c is None else c) for (u, v), c in self._caps.items()))
        value = residual.max_flow(s, t)
        if value >= infinite:
            raise GraphError(f"no finite cut separates {source!r} from {sink!r}: "
                             f"path of infinite edges {self._infinite_path(s, t)}")
        side = residual.reachable(s)
        names = list(self._ids)
        crossing = tuple((names[u], names[v]) for u, v in self._caps if u in side and v not in side)
        return Cut(value, frozenset(names[u] for u in side), crossing)

    def _infinite_path(self, s: int, t: int) -> list:
        names, parent, todo = list(self._ids), {s: s}, deque([s])
        while todo and t not in parent:
            u = todo.popleft()
            for (a, b), c in self._caps.items():
                if a == u and c is None and b not in parent:
                    parent[b] = u
                    todo.append(b)
        path = [t] if t in parent else []
        while path and path[-1] != s:
            path.append(parent[path[-1]])
        return [names[v] for v in reversed(path)]


class _Residual:
    """The residual graph as flat arrays: edge e runs `to[e ^ 1] -> to[e]`, its reverse is `e ^ 1`."""

    def __init__(self, n: int, edges) -> None:
        self.out: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[int] = []
        for u, v, c in edges:
            self.out[u].append(len(self.to))
            self.to += [v, u]
            self.cap += [c, 0]
            self.out[v].append(len(self.to) - 1)

    def max_flow(self, s: int, t: int) -> int:
        flow = 0
        while (level := self._levels(s, t)) is not None:
            flow += self._blocking_flow(s, t, level)
        return flow

    def _levels(self, s: int, t: int) -> list[int] | None:
        """BFS distances from s over edges with room left; None when t is out of reach."""
        level = [-1] * len(self.out)
        level[s] = 0
        todo = deque([s])
        while todo:
            u = todo.popleft()
            for e in self.out[u]:
                v = self.to[e]
                if self.cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    todo.append(v)
        return level if level[t] >= 0 else None

    def _blocking_flow(self, s: int, t: int, level: list[int]) -> int:
        """Augment along shortest paths until none is left (iterative DFS with current-arc pointers)."""
        out, to, cap = self.out, self.to, self.cap
        arc = [0] * len(out)
        total, path, u = 0, [], s
        while True:
            if u == t:
                pushed = min(cap[e] for e in path)
                for e in path:
                    cap[e] -= pushed
                    cap[e ^ 1] += pushed
                total, path, u = total + pushed, [], s
                continue
            edges = out[u]
            while arc[u] < len(edges) and not (cap[edges[arc[u]]] > 0 and level[to[edges[arc[u]]]] == level[u] + 1):
                arc[u] += 1
            if arc[u] < len(edges):
                path.append(edges[arc[u]])
                u = to[edges[arc[u]]]
            elif u == s:
                return total
            else:  # dead end: never come back, retreat one edge
                level[u] = -1
                u = to[path.pop() ^ 1]
                arc[u] += 1

    def reachable(self, s: int) -> set[int]:
        seen, todo = {s}, deque([s])
        while todo:
            u = todo.popleft()
            for e in self.out[u]:
                if self.cap[e] > 0 and self.to[e] not in seen:
                    seen.add(self.to[e])
                    todo.append(self.to[e])
        return seen
