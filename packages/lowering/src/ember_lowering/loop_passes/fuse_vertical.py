"""fuse-vertical: merge a kernel into a later kernel that reads what it writes, over one iteration space.

This is how a reduction takes its pointwise epilogue (layer norm's normalization after its Welford loop,
softmax's division after its sums) and how a reduction that needs another's result joins it (softmax's sum
after its max): the consumer's body runs in a new loop, or after the loops, of the producer's kernel, and its
loads of the producer's outputs take the values straight from the producer's body. Legal when the spaces
match (see `_fusion.space_map`; or do once one kernel's dims are split to the other's, `_rewrite.refine`: a
bias's gradient sums the rows of a (1024, 1024) view of a pointwise kernel's (8, 128, 1024) values), every such
load reads the element written in the same iteration, and no third step sits between the two. Nothing is
recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._decisions import Note
from .._fusion import SpaceMap, deps_of, describe, merge, reads_match, replace_steps, space_map
from .._loop_ir import Kernel, KernelPlan
from .._rewrite import refine


@dataclass(frozen=True)
class _Pair:
    steps: tuple[Kernel, Kernel]  # the producer and the consumer as the plan holds them
    producer: Kernel  # the two as they would merge (one split to the other's dims where needed)
    consumer: Kernel
    space: SpaceMap | None
    refusal: tuple[str, str] | None  # (reason code, in words), from the two kernels alone


class FuseVertical:
    id = "fuse-vertical"
    # fused: the consumer reads what the producer writes in the same iteration; kept: the iteration spaces
    # differ / it reads another element than the one written / a third step runs between them
    reasons = frozenset({"same-iteration", "spaces-differ", "other-element", "step-between"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        refused: set[tuple] = set()
        judged: dict[tuple[int, int], _Pair] = {}
        while True:
            fused = self.fuse_one(plan, note, refused, judged)
            if fused is None:
                return plan
            plan = fused

    def fuse_one(self, plan: KernelPlan, note: Note, refused: set[tuple],
                 judged: dict[tuple[int, int], _Pair]) -> KernelPlan | None:
        """One merge, or None when no pair fuses. A pair of steps is judged once per run (`judged`, by identity:
        steps are immutable, and the entry holds them, so an id is not reused): each merge starts the scan
        again, and matching spaces and reads (sympy) again for every kept pair made a big training graph's
        fusion quadratic in sympy work. Only "a step runs between them" is asked again: merges change it."""
        deps = deps_of(plan)
        lowers = {s.name: s.lower for s in plan.symbols if s.lower is not None}
        for b, consumer in enumerate(plan.steps):
            if not isinstance(consumer, Kernel):
                continue
            for a in sorted(deps.deps[b], reverse=True):
                if not isinstance(plan.steps[a], Kernel):
                    continue
                producer = plan.steps[a]
                pair = judged.get((id(producer), id(consumer)))
                if pair is None or pair.steps[0] is not producer or pair.steps[1] is not consumer:
                    pair = judged[id(producer), id(consumer)] = self.judge(producer, consumer, lowers)
                refusal = pair.refusal
                if refusal is None and deps.path(a, b):
                    refusal = "step-between", "another step runs between them"
                if refusal is not None:
                    key = (describe(pair.producer), describe(pair.consumer))
                    if key not in refused:
                        refused.add(key)
                        note("kept", refusal[0], (pair.producer.name, pair.consumer.name),
                             f"keep {key[0]} apart from {key[1]}: {refusal[1]}")
                    continue
                merged = merge(pair.producer, pair.consumer, pair.space)
                note("fused", "same-iteration", (pair.producer.name, pair.consumer.name),
                     f"fuse {describe(pair.producer)} into {describe(pair.consumer)}: consumer reads the "
                     f"producer's results in the same iteration")
                return replace_steps(plan, {a}, {b: merged})
        return None

    def judge(self, producer: Kernel, consumer: Kernel, lowers: dict[str, int]) -> _Pair:
        """What the two kernels alone say: the pair as it would merge (one of them split to the other's dims
        where needed), its shared space, and why not where the spaces or the elements read differ."""
        a, b = self.spaces_matched(producer, consumer, lowers)
        space = space_map(a, b)
        if space is None:
            return _Pair((producer, consumer), a, b, None, ("spaces-differ", "iteration spaces differ"))
        mismatch = reads_match(a, b, space)
        return _Pair((producer, consumer), a, b, space, None if mismatch is None else ("other-element", mismatch))

    @staticmethod
    def spaces_matched(producer: Kernel, consumer: Kernel, lowers: dict[str, int]) -> tuple[Kernel, Kernel]:
        """The two kernels, one of them over its dims split to the other's where their spaces differ only so (a
        bias's gradient sums a (1024, 1024) view of the (8, 128, 1024) values a pointwise kernel computes), and
        the split one then reads what the other writes in the same iteration."""
        if space_map(producer, consumer) is not None:
            return producer, consumer
        for a, b in ((producer, refine(consumer, [d.size for d in producer.dims], lowers)),
                     (refine(producer, [d.size for d in consumer.dims], lowers), consumer)):
            if a is not None and b is not None:
                m = space_map(a, b)
                if m is not None and reads_match(a, b, m) is None:
                    return a, b
        return producer, consumer
