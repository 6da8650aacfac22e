"""The `mincut` partitioner: rematerialization by max-flow min-cut over the joint graph.

Weights (see `_network` for the network itself):
- saving a value costs its bytes, except a primal (free: the caller holds it), a forward output eager's
  autograd saves too (free: `JointInfo.held_outputs`; the caller holds it as it holds a primal) and a view (never
  saved: the backward takes the view again from its base, for nothing);
- running a forward node again in the backward costs what its op class says (`_cost_model`): views and sizes
  nothing, pointwise ops one tie-break unit, reductions and unknown ops their estimated FLOPs times a price `lam`
  (infinite at memory budget 1), matmul / convolution / attention / random / in-place ops infinity.

Bytes are scaled by `K` (one more than the number of tie-break units), so at budget 1 the cut saves the fewest
bytes that free recomputation allows and, among those, recomputes the fewest ops.

Activation checkpointing (`torch.utils.checkpoint`) marks the forward nodes of its regions; `_checkpointing` says
how the cut honours them: a marked region's values are never saved but where they leave the region, its ops (a
matmul too) run again in the backward at one tie-break unit each, and values marked for saving are never
recomputed.

Before the cut, `renormalize` gives each layer / batch norm a pointwise way to produce its output again from its
input and statistics, so the backward need not save a norm's output (the forward still computes it once), and
`split_log_softmax` writes a log_softmax the backward reads as its row statistics and a pointwise tail.

A budget b < 1 asks for at most B0 + b·(B1 - B0) bytes, where B1 is the budget-1 answer and B0 the fewest bytes
reachable when reductions and unknown ops may run again too. The price `lam` of their FLOPs in bytes is searched
by bisection: each `lam` gives an exact min-cut of bytes + lam·FLOPs, and the answer is the one with the fewest
recompute FLOPs under the target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ember_core import JointGraph, OptionError, Partition, to_dtype

from ._assemble import assemble
from ._checkpointing import checkpointing
from ._cost_model import op_class, recompute_flops
from ._joint import JointInfo, analyze
from ._log_softmax_stats import split_log_softmax
from ._network import CutWeights, choose
from ._renormalize import renormalize
from ._sizes import hints, nbytes
from ._split import place

OPTION = "partition.memory_budget"
SEARCH_STEPS = 24  # bisection steps over log(lam): the answer's price is within a factor of ~1.0001 of the best


class MinCutPartitioner:
    """Saves the fewest bytes that recomputing cheap ops allows; `partition.memory_budget` < 1 recomputes more."""

    name = "mincut"

    def __init__(self, memory_budget: float | None = None):
        self.memory_budget = None if memory_budget is None else check_budget(memory_budget)

    def partition(self, joint: JointGraph, options: Mapping[str, Any] | None = None) -> Partition:
        budget = self.memory_budget
        if budget is None:
            value = (options or {}).get(OPTION)
            budget = check_budget(1.0 if value is None else value)
        expanded = renormalize(split_log_softmax(joint))
        info = analyze(expanded.joint)
        saved, notes = Rematerializer(info).saved_for(budget)
        return assemble(info, saved, self.name, budget, notes, finish=expanded.collapse)


def budget_problem(value: Any) -> str | None:
    """What is wrong with a memory budget, or None (checked by `ember.compile` and by the partitioner itself)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        return "must be a number in (0, 1]"
    return None


def check_budget(value: Any) -> float:
    problem = budget_problem(value)
    if problem:
        raise OptionError(f"option {OPTION!r} {problem}, got {value!r}")
    return float(value)


_EQUALITY = frozenset({"aten.eq.Tensor", "aten.ne.Tensor"})


@dataclass(frozen=True)
class Candidate:
    """One cut's outcome: what it saves, its activation bytes, and the estimated FLOPs it recomputes."""

    saved: tuple[str, ...]
    nbytes: int
    flops: int


class Rematerializer:
    """The network weights of one joint graph, and the search over the price of recompute for a memory budget."""

    def __init__(self, info: JointInfo):
        self.info = info
        graph, self.hints = info.graph, hints(info.graph)
        self.nodes = [i for i in sorted(info.needed) if i not in info.tangent_closure]
        self.classes = {i: op_class(graph.nodes[i].op) for i in self.nodes}
        self.flops = {i: recompute_flops(graph.nodes[i], graph, self.hints) for i in self.nodes}
        self.scale = 1 + sum(1 for i in self.nodes if i in info.forward and self.classes[i] != "view")
        self.backward = self._pinned_to_backward()
        self.compared = self._compared_in_backward()
        self.checkpointing = checkpointing(info, self.classes, self._recomputable)
        self.save = {v: self._save_cost(i, v) for i in self.nodes for v in graph.nodes[i].outputs}

    def _pinned_to_backward(self) -> frozenset[int]:
        """Nodes outside the forward whose place in the joint order matters (random draws, in-place writes and
        reads of written storage) stay in the backward, where the joint runs them; so do the nodes reading them."""
        info, pinned = self.info, set()
        for i in self.nodes:
            order_matters = self.classes[i] in ("random", "mutating") or info.touches_mutated(i)
            reads_pinned = any(info.producer.get(r) in pinned for r in info.reads[i])
            if i not in info.forward and (order_matters or reads_pinned):
                pinned.add(i)
        return frozenset(pinned)

    def _compared_in_backward(self) -> frozenset[int]:
        """Forward nodes whose floating-point result the backward tests for equality (`aten.eq.Tensor`: the
        gradient of amax/amin/max finds the maximum's places as `x == amax(x)`). Recomputed in the backward, by
        another kernel, another vectorization or another codegen (the interpreter after a fallback), `x` may
        differ from the forward's in its last bit; then no element equals the saved maximum, the count of ties is
        0, and the gradient is NaN. Such a result is saved, never recomputed; where the test reads a view of it,
        the view's base is (a view is always taken again from its base)."""
        info, graph, found = self.info, self.info.graph, set()
        for j, node in enumerate(graph.nodes):
            if node.op not in _EQUALITY or j in info.forward:
                continue
            stack = list(info.reads[j])
            while stack:
                r = stack.pop()
                i, value = info.producer.get(r), graph.values.get(r)
                if i not in info.forward or i in found or value is None or not to_dtype(value.dtype).is_floating_point:
                    continue
                found.add(i)
                if self.classes[i] == "view":
                    stack += info.reads[i]
        return frozenset(found)

    def _save_cost(self, i: int, v: str) -> int | None:
        info, ckpt = self.info, self.checkpointing
        if v in info.input_views and self.classes[i] != "view":
            return 0  # shares a primal's storage (known from `Value.base`): costs nothing
        if v in info.held_outputs and self.classes[i] != "view":
            return 0  # a forward output eager's backward reads too: the caller holds it
        if self.classes[i] == "view" and v not in info.mutated:
            return None  # never save a view: take it again from its base
        if i in ckpt.recompute and v not in ckpt.leaving:
            return None  # inside a checkpointed region: the backward runs the region again
        return nbytes(info.graph.values[v], self.hints) * self.scale

    def _recomputable(self, i: int) -> bool:
        """Whether ember may run forward node i again in the backward, whatever it costs."""
        cls = self.classes[i]
        return cls not in ("random", "mutating") and not self.info.touches_mutated(i) and i not in self.compared

    def _recompute_cost(self, i: int, lam: float | None) -> int | None:
        info, cls, ckpt = self.info, self.classes[i], self.checkpointing
        if i not in info.forward:  # not a recomputation on either side (or pinned to the backward)
            return 0
        if cls in ("random", "mutating") or info.touches_mutated(i):
            return None
        if cls in ("view", "size"):
            return 0
        if i in self.compared or i in ckpt.never_recomputed:
            return None
        if i in ckpt.recompute or cls == "pointwise":
            return 1  # a checkpointed region's ops, matmuls included, run again at one tie-break unit each
        if cls == "expensive":
            return None
        return None if lam is None else 1 + round(lam * self.flops[i] * self.scale)

    def weights(self, lam: float | None) -> CutWeights:
        """Capacities with recompute of reductions and unknown ops priced at `lam` bytes per FLOP (None: banned)."""
        return CutWeights(self.save, {i: self._recompute_cost(i, lam) for i in self.nodes}, self.backward)

    def solve(self, lam: float | None) -> Candidate:
        where = place(self.info, choose(self.info, self.weights(lam)).saved)
        mutated = {i.name for i in self.info.graph.inputs if i.mutated}  # saved as copies: they cost bytes
        free = (set(self.info.primals) - mutated) | self.info.input_views | self.info.held_outputs
        size = sum(nbytes(self.info.graph.values[v], self.hints) for v in where.saved if v not in free)
        flops = sum(self.flops.get(i, 0) for i in where.recomputed)
        return Candidate(where.saved, size, flops)

    def saved_for(self, budget: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The saved values for a memory budget, and notes for the report."""
        saved, notes = self._saved_for(budget)
        return saved, (*self._checkpoint_notes(saved), *notes)

    def _saved_for(self, budget: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
        fast = self.solve(None)
        if budget >= 1:
            return fast.saved, ()
        lean = self.solve(0.0)
        if lean.nbytes >= fast.nbytes:
            return fast.saved, (f"memory budget {budget:g}: recomputing more saves nothing here ({fast.nbytes:,} B)",)
        target = lean.nbytes + budget * (fast.nbytes - lean.nbytes)
        best = self._search(target, lean, fast)
        return best.saved, (f"memory budget {budget:g}: at most {target:,.0f} B of activations, between "
                            f"{lean.nbytes:,} B (most recompute) and {fast.nbytes:,} B (budget 1)",)

    def _checkpoint_notes(self, saved: tuple[str, ...]) -> tuple[str, ...]:
        ckpt = self.checkpointing
        if not ckpt:
            return ()
        again = set(place(self.info, saved).recomputed) & ckpt.recompute
        kept = {self.info.producer[v] for v in saved if v in self.info.producer}
        return (f"activation checkpointing: {ckpt.regions} region(s); the backward runs {len(again)} of their "
                f"{len(ckpt.recompute)} ops marked for recompute again and reads {len(kept & ckpt.boundary)} "
                f"value(s) between regions and {len(kept & ckpt.keep)} marked for saving",)

    def _search(self, target: float, lean: Candidate, fast: Candidate) -> Candidate:
        weighted = [self.flops[i] for i in self.nodes if self.flops[i] > 0]
        lo = math.log(1.0 / (2 * self.scale * max(weighted, default=1)))  # every price rounds to nothing
        hi = math.log(max(1, fast.nbytes) + 1.0)  # one FLOP costs more than every byte saved
        fits = [lean]
        for _ in range(SEARCH_STEPS):
            mid = (lo + hi) / 2
            cand = self.solve(math.exp(mid))
            if cand.nbytes <= target:
                fits.append(cand)
                lo = mid
            else:
                hi = mid
        return min(fits, key=lambda c: (c.flops, c.nbytes))
