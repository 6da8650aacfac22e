"""The joint graph as a flow network, and a cut of it as a choice of saved values.

Each node `i` becomes a vertex `("in", i)` and each value `v` it defines a vertex `("out", v)`; the edge between
them costs what saving `v` costs. Data flows along infinite edges `("out", v) -> ("in", reader)`. The source side
of a cut is what the forward computes; the sink side is what the backward computes. So:

- a node that reads a tangent is tied to the sink (it runs in the backward);
- a value a gradient or a backward node reads is tied to the sink (the backward must have it);
- `source -> ("in", i)` costs what running node `i` again in the backward costs (infinite: never).

A cut then crosses `("in", i) -> ("out", v)` for each saved value and `source -> ("in", i)` for each recomputed
node, and its value is the total cost: the cheapest cut is the cheapest way to give the backward what it needs.
Primals, tangents and constants are no vertices: the backward may always read them (a primal it reads is saved,
for free: the caller holds it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._joint import JointInfo
from ._max_flow import Cut, FlowNetwork

SOURCE, SINK = "source", "sink"


@dataclass(frozen=True)
class CutWeights:
    """Capacities: `save[v]` for saving value v, `recompute[i]` for running forward node i again in the backward.

    `None` is infinite: a value that cannot be saved, a node that must not run in the backward. A node missing
    from `recompute` is free to run on either side. Nodes in `backward` run in the backward, like those that
    read a tangent (and so must every node that reads them)."""

    save: Mapping[str, int | None]
    recompute: Mapping[int, int | None]
    backward: frozenset[int] = frozenset()


@dataclass(frozen=True)
class CutChoice:
    """What a cut decides: the values to save (in definition order), and what the cut costs."""

    saved: tuple[str, ...]
    value: int


def build_network(info: JointInfo, weights: CutWeights) -> FlowNetwork:
    net = FlowNetwork()
    graph = info.graph
    backward = info.tangent_closure | weights.backward
    for i in sorted(info.needed):
        if i in backward:
            net.add_edge(("in", i), SINK, None)
            for r in info.reads[i]:
                if r in info.producer and info.producer[r] not in backward:
                    net.add_edge(("out", r), SINK, None)
            continue
        cost = weights.recompute.get(i, 0)
        if cost != 0:
            net.add_edge(SOURCE, ("in", i), cost)
        for v in graph.nodes[i].outputs:
            net.add_edge(("in", i), ("out", v), weights.save[v])
        for r in info.reads[i]:
            if r in info.producer:
                net.add_edge(("out", r), ("in", i), None)
    for g in info.grads:
        i = info.producer.get(g.name)
        if i is not None and i not in backward:
            net.add_edge(("out", g.name), SINK, None)
    return net


def choose(info: JointInfo, weights: CutWeights) -> CutChoice:
    """The cheapest cut's saved values. Which nodes run again follows from them (see `_split`)."""
    cut = build_network(info, weights).min_cut(SOURCE, SINK)
    return choice_of(info, cut)


def choice_of(info: JointInfo, cut: Cut) -> CutChoice:
    saved = {v[1] for u, v in cut.edges if u != SOURCE and v != SINK and v[0] == "out"}
    order = [o for n in info.graph.nodes for o in n.outputs]
    return CutChoice(tuple(v for v in order if v in saved), cut.value)
