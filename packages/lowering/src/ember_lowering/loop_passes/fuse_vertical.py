"""fuse-vertical: merge a kernel into a later kernel that reads what it writes, over one iteration space.

This is how a reduction takes its pointwise epilogue (layer norm's normalization after its Welford loop,
softmax's division after its sums) and how a reduction that needs another's result joins it (softmax's sum
after its max): the consumer's body runs in a new loop, or after the loops, of the producer's kernel, and its
loads of the producer's outputs take the values straight from the producer's body. Legal when the spaces
match (see `_fusion.space_map`), every such load reads the element written in the same iteration, and no
third step sits between the two. Nothing is recomputed.
"""

from __future__ import annotations

from .._decisions import Note
from .._fusion import deps_of, describe, merge, reads_match, replace_steps, space_map
from .._loop_ir import Kernel, KernelPlan


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
        for b, consumer in enumerate(plan.steps):
            if not isinstance(consumer, Kernel):
                continue
            for a in sorted(deps.deps[b], reverse=True):
                producer = plan.steps[a]
                if not isinstance(producer, Kernel):
                    continue
                refusal = self.refuse(plan, deps, a, b)
                if refusal is not None:
                    key = (describe(producer), describe(consumer))
                    if key not in refused:
                        refused.add(key)
                        note("kept", refusal[0], (producer.name, consumer.name),
                             f"keep {key[0]} apart from {key[1]}: {refusal[1]}")
                    continue
                merged = merge(producer, consumer, space_map(producer, consumer))
                note("fused", "same-iteration", (producer.name, consumer.name),
                     f"fuse {describe(producer)} into {describe(consumer)}: consumer reads the producer's "
                     f"results in the same iteration")
                return replace_steps(plan, {a}, {b: merged})
        return None

    @staticmethod
    def refuse(plan: KernelPlan, deps, a: int, b: int) -> tuple[str, str] | None:
        """(reason code, reason in words) not to fuse step a into step b, or None."""
        producer, consumer = plan.steps[a], plan.steps[b]
        m = space_map(producer, consumer)
        if m is None:
            return "spaces-differ", "iteration spaces differ"
        mismatch = reads_match(producer, consumer, m)
        if mismatch is not None:
            return "other-element", mismatch
        if deps.path(a, b):
            return "step-between", "another step runs between them"
        return None
