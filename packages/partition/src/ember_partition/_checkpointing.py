"""Activation checkpointing (`torch.utils.checkpoint`) in the min-cut: what the user's marks ask of the cut.

The joint trace gives each forward node of a checkpointed region the region's marks (ember-core's
`checkpoint_region`, `marked_for_recompute`, `marked_for_saving`). Eager's checkpoint keeps a region's inputs and
runs the region again in the backward; the cut does the same in its own terms:

- a value computed in a region marked for recompute is not saved: the backward computes it again from what is,
  whatever its op (a matmul included). A value a later region reads is the later region's input: it is saved, never
  recomputed (as eager's second checkpoint keeps its input), so the backward runs each region again from its own
  inputs, not the whole chain from the first; one that unmarked forward nodes or the forward's outputs read stays
  savable, and the cut decides about it as about any other value;
- a node marked for saving (selective checkpointing's `MUST_SAVE`/`PREFER_SAVE`) is never recomputed;
- what ember never recomputes stays saved, marks or not: random draws (the backward must see the forward's mask;
  eager draws it again from the same seed, with the same values), in-place writes, values the backward compares
  for equality.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ember_core import checkpoint_region, marked_for_recompute, marked_for_saving

from ._joint import JointInfo


@dataclass(frozen=True)
class Checkpointing:
    recompute: frozenset[int] = frozenset()  # forward nodes whose values are not saved (except `leaving` ones)
    leaving: frozenset[str] = frozenset()  # their values read outside their region: savable
    keep: frozenset[int] = frozenset()  # forward nodes marked for saving: never recomputed
    boundary: frozenset[int] = frozenset()  # marked nodes whose values a later region reads: never recomputed
    regions: int = 0

    def __bool__(self) -> bool:
        return bool(self.recompute or self.keep or self.boundary)

    @property
    def never_recomputed(self) -> frozenset[int]:
        return self.keep | self.boundary


def checkpointing(info: JointInfo, classes: Mapping[int, str], recomputable: Callable[[int], bool]) -> Checkpointing:
    """The marks of `info`'s forward nodes as the cut uses them; `recomputable(i)`: ember may run node i again."""
    graph = info.graph
    regions = {i: checkpoint_region(graph.nodes[i].meta) for i in info.forward}
    recompute = frozenset(i for i in info.forward if marked_for_recompute(graph.nodes[i].meta)
                          and classes.get(i) not in ("view", "size") and recomputable(i))
    keep = frozenset(i for i in info.forward if marked_for_saving(graph.nodes[i].meta))
    readers: dict[str, list[int]] = {}
    for j in sorted(info.forward):
        for r in info.reads[j]:
            readers.setdefault(r, []).append(j)
    outputs = {o.name for o in info.forward_outputs}

    def leaves(v: str, region: int | None) -> str | None:
        """Where v goes outside `region`, directly or through views: "region" when a later region reads it, "out"
        when only unmarked forward nodes or the forward's outputs do; None when it stays inside."""
        todo, seen, where = [v], set(), None
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            where = "out" if u in outputs else where
            for j in readers.get(u, ()):
                if classes.get(j) == "view":
                    todo.extend(graph.nodes[j].outputs)
                elif regions[j] is not None and regions[j] != region:
                    return "region"
                elif not (marked_for_recompute(graph.nodes[j].meta) or marked_for_saving(graph.nodes[j].meta)):
                    where = "out"
        return where

    exits = {(i, v): leaves(v, regions[i]) for i in recompute for v in graph.nodes[i].outputs}
    leaving = frozenset(v for (_, v), where in exits.items() if where)
    boundary = frozenset(i for (i, _), where in exits.items() if where == "region")
    count = len({regions[i] for i in recompute | keep})
    return Checkpointing(recompute - boundary, leaving, keep, boundary, count)
