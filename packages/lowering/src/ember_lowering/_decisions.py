"""Pass decisions as data: which pass chose what for which kernels, values or buffers, and why.

A pass reports each choice by calling `note(verdict, reason, subjects, detail)`. The scheduler stamps the pass
id, checks the verdict against `VERDICTS` and the reason against the pass's own closed set (`Pass.reasons`),
logs the decision on `ember.kernels` and collects it for the `kernels_planned` event. Tests compare the
structured fields; `detail` is the sentence for people and may change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ._errors import LoweringError

VERDICTS = frozenset({
    "fused",  # two steps became one (fuse-inline, fuse-vertical, fuse-siblings)
    "folded",  # an op the value ranges decide became a constant or one of its operands (bound-indices)
    "proven",  # a gather's index is inside its buffer for every input: not tested at run time (bound-indices)
    "kept",  # left apart or as it is
    "merged",  # two dims became one (coalesce-dims)
    "reordered",  # a kernel's dims nest in another order (order-dims)
    "stashed",  # a value is kept per row for a later loop (stash-values)
    "recomputed",  # a value is computed again where it is needed
    "reused",  # a buffer takes a dead buffer's storage (plan-buffers)
    "split",  # one reduction became two passes over its row (split-moments)
    "widened",  # ops read an intermediate in float32, before its rounding to bfloat16 (keep-float32)
    "assembled",  # a buffer is written part by part where its pieces are made (cat-in-place)
})


@dataclass(frozen=True, slots=True)
class Decision:
    """One choice of one pass. subjects: the kernels, values or buffers it concerns, most important first."""

    pass_id: str
    verdict: str
    reason: str
    subjects: tuple[str, ...]
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.pass_id}: {self.verdict} {', '.join(self.subjects)} [{self.reason}]: {self.detail}"


class Note(Protocol):
    def __call__(self, verdict: str, reason: str, subjects: Sequence[str], detail: str = "") -> None: ...


def make_decision(pass_id: str, reasons: frozenset[str], verdict: str, reason: str, subjects: Sequence[str],
                  detail: str) -> Decision:
    """A checked Decision: an unknown verdict or a reason outside the pass's set is a bug in the pass."""
    if verdict not in VERDICTS:
        raise LoweringError(f"pass {pass_id!r} gave unknown verdict {verdict!r}; known: {sorted(VERDICTS)}")
    if reason not in reasons:
        raise LoweringError(f"pass {pass_id!r} gave reason {reason!r} outside its set {sorted(reasons)}")
    return Decision(pass_id, verdict, reason, tuple(subjects), detail)
