"""What a codegen's kernels can do, said once: the loop-IR pipeline picks its passes from it.

A codegen does not name passes to drop or undo; it declares `Capabilities`, and each pass of `default_passes()`
that depends on one says so (`Pass.wanted(capabilities)`): stash-values runs only for a codegen that keeps a
row's values between the loops of a kernel (`stashes`), split-moments only for one that does not compute a short
row's moments in registers itself (`row_moments`). A pass that adapts says so too (`Pass.configured(capabilities)`,
the pass to run): plan-buffers lends ATen results' storage unless a GEMM may run fused with its epilogue
(`gemm_epilogues`). A codegen may add passes of its own, each after a named default pass (`passes`), and says how
long reductions with few results split (`split_reductions`). The shared layer asks capabilities, never device
names: `cuda_graphs` says whether reduce-overhead may replay the wrapper as a
CUDA graph. The capabilities are part of the plan cache's facts (`fact()`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._split_reductions import SplitPolicy


@dataclass(frozen=True)
class Capabilities:
    """A codegen's kernels: what they do (see the module docstring)."""

    stashes: bool = True  # a `local` row lives between a kernel's loops (stack arrays, registers)
    row_moments: bool = False  # a short row's mean and variance come from two passes over registers, Welford kept
    split_reductions: SplitPolicy | None = None  # long reductions with few results split in two under this policy
    cuda_graphs: bool = False  # reduce-overhead may record and replay the wrapper as a CUDA graph
    # a GEMM's product may be computed inside the kernel after it (matmul templates) and never exist as the
    # ATen call's result: plan-buffers then lends no ATen result's storage
    gemm_epilogues: bool = False
    # (id of the default pass it runs after, the pass): a codegen's own loop-IR passes at named points
    passes: tuple[tuple[str, Any], ...] = ()

    def fact(self) -> str:
        """Everything here that changes a plan, as one string for the plan cache."""
        own = ",".join(f"{p.id}@{after}" for after, p in self.passes)
        split = self.split_reductions.fact() if self.split_reductions is not None else "none"
        return f"stashes={int(self.stashes)} row_moments={int(self.row_moments)} split={split} passes={own}" \
               f" gemm_epilogues={int(self.gemm_epilogues)}"


def select_passes(defaults: Sequence[Any], capabilities: Capabilities) -> tuple[Any, ...]:
    """The pipeline for a codegen: the default passes it wants, its own after the named ones (`ValueError` for a
    point that names no default pass)."""
    ids = {p.id for p in defaults}
    unknown = sorted(after for after, _ in capabilities.passes if after not in ids)
    if unknown:
        raise ValueError(f"codegen passes placed after {unknown}, which are not default passes ({sorted(ids)})")
    out = []
    for p in defaults:
        wanted, configured = getattr(p, "wanted", None), getattr(p, "configured", None)
        if wanted is None or wanted(capabilities):
            out.append(configured(capabilities) if configured is not None else p)
        out.extend(own for after, own in capabilities.passes if after == p.id)
    return tuple(out)
