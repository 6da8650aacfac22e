"""Where each node of a joint graph comes from in the user's code: the captured node's `source` and `module`
meta, carried to every node its forward records and to every node its backward records; and its activation
checkpointing marks (`ember_core.CHECKPOINT_META`), carried to the nodes its forward records only (the partitioner
reads them there: a forward value of a checkpointed region is recomputed, not saved).

The joint trace replays the captured graph one node at a time (`Interpreter(after_node=...)`). After node N runs,
the nodes make_fx recorded since the previous one are N's forward, and the autograd nodes (`grad_fn`s) N's outputs
brought into being, reached through `next_functions` up to those an earlier node made, are N's backward. Each such
`grad_fn` gets a pre-hook: when `autograd.grad` reaches it, the nodes recorded until then are the previous
`grad_fn`'s work, and from then on N's. (The engine runs one node at a time here: the trace turns its threads off.)
This is the idea behind torch's own stack-trace preservation for AOTAutograd, written for ember's joint trace.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from ember_core import CHECKPOINT_META, Node

LOCATION_META = ("source", "module")
KEY = "ember_location"  # fx meta key: the location of the captured node a recorded node comes from


class Locations:
    def __init__(self, tracer_graph: fx.Graph):
        self.graph = tracer_graph
        self._last = self._tail()
        self._seen: set[int] = set()
        self._keep: list[Any] = []  # the grad_fns hooked, alive as long as the trace
        self.current: dict[str, str] = {}  # where the backward's nodes recorded now come from

    def _tail(self) -> fx.Node:
        nodes = list(self.graph.nodes)
        return nodes[-1] if nodes else self.graph._root

    def _tag_new(self, location: dict[str, str]) -> None:
        """Give the nodes recorded since the last call `location` (those recorded before keep theirs)."""
        node = self._last.next
        while node.op != "root":
            if location and KEY not in node.meta:
                node.meta[KEY] = location
            self._last = node
            node = node.next

    def after_node(self, _index: int, node: Node, result: Any) -> None:
        """The captured `node` ran: what was recorded meanwhile is its forward; the grad_fns it made, its backward."""
        location = {k: node.meta[k] for k in LOCATION_META if k in node.meta}
        self._tag_new({**location, **{k: node.meta[k] for k in CHECKPOINT_META if k in node.meta}})
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        stack = [t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in self._seen:
                continue
            self._seen.add(id(fn))
            self._keep.append(fn)
            if location:
                fn.register_prehook(self._entering(location))
            stack.extend(next_fn for next_fn, _ in fn.next_functions)

    def _entering(self, location: dict[str, str]):
        def prehook(_grad_outputs):
            self._tag_new(self.current)
            self.current = location
        return prehook

    def finish(self) -> None:
        """After the backward: the nodes recorded since the last pre-hook are the last grad_fn's."""
        self._tag_new(self.current)


def location_meta(node: fx.Node) -> dict[str, str]:
    return dict(node.meta.get(KEY, {}))
