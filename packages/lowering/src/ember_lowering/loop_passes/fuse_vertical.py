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

from .._decisions import Note
from .._fusion import deps_of, describe, merge, reads_match, replace_steps, space_map
from .._loop_ir import Kernel, KernelPlan
from .._rewrite import refine


class FuseVertical:
    id = "fuse-vertical"
    # fused: the consumer reads what the producer writes in the same iteration; kept: the iteration spaces
    # differ / it reads another element than the one written / a third step runs between them
    reasons = frozenset({"same-iteration", "spaces-differ", "other-element", "step-between"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        refused: set[tuple] = set()
        while True:
            fused = self.fuse_one(plan, note, refused)
            if fused is None:
                return plan
            plan = fused

    def fuse_one(self, plan: KernelPlan, note: Note, refused: set[tuple]) -> KernelPlan | None:
        deps = deps_of(plan)
        lowers = {s.name: s.lower for s in plan.symbols if s.lower is not None}
        for b, consumer in enumerate(plan.steps):
            if not isinstance(consumer, Kernel):
                continue
            for a in sorted(deps.deps[b], reverse=True):
                if not isinstance(plan.steps[a], Kernel):
                    continue
                producer, matched = self.spaces_matched(plan.steps[a], consumer, lowers)
                refusal = self.refuse(producer, matched, deps, a, b)
                if refusal is not None:
                    key = (describe(producer), describe(matched))
                    if key not in refused:
                        refused.add(key)
                        note("kept", refusal[0], (producer.name, matched.name),
                             f"keep {key[0]} apart from {key[1]}: {refusal[1]}")
                    continue
                merged = merge(producer, matched, space_map(producer, matched))
                note("fused", "same-iteration", (producer.name, matched.name),
                     f"fuse {describe(producer)} into {describe(matched)}: consumer reads the producer's "
                     f"results in the same iteration")
                return replace_steps(plan, {a}, {b: merged})
        return None

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

    @staticmethod
    def refuse(producer: Kernel, consumer: Kernel, deps, a: int, b: int) -> tuple[str, str] | None:
        """(reason code, reason in words) not to fuse `producer` (step a) into `consumer` (step b), or None."""
        m = space_map(producer, consumer)
        if m is None:
            return "spaces-differ", "iteration spaces differ"
        mismatch = reads_match(producer, consumer, m)
        if mismatch is not None:
            return "other-element", mismatch
        if deps.path(a, b):
            return "step-between", "another step runs between them"
        return None
