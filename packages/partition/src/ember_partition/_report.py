"""`PartitionReport`: what a partitioner saved and recomputed, readable as text and sent as a `partitioned` event."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._cost_model import recompute_flops
from ._joint import JointInfo
from ._sizes import hints, nbytes
from ._split import Split

Dim = int | str


@dataclass(frozen=True, slots=True)
class SavedValue:
    """One value the forward hands the backward. `kind`: "activation" (costs memory), "input" or "input view"
    (a primal or a view of one: free, the caller holds it), "output" (a forward output eager's autograd saves too:
    free, the caller holds it as well; `JointInfo.held_outputs`)."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    nbytes: int
    kind: str = "activation"

    @property
    def free(self) -> bool:
        return self.kind != "activation"


@dataclass(frozen=True, slots=True)
class RecomputedOp:
    """A forward node the backward runs again, with its estimated cost in element operations."""

    outputs: tuple[str, ...]
    op: str
    flops: int


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """A partitioner's account of one partition: saved values with shapes and bytes, recomputed ops, costs."""

    partitioner: str
    saved: tuple[SavedValue, ...]
    recomputed: tuple[RecomputedOp, ...] = ()
    memory_budget: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def saved_bytes(self) -> int:
        """Bytes of saved activations: values that are neither primals, views of primals nor held outputs."""
        return sum(s.nbytes for s in self.saved if not s.free)

    @property
    def recompute_flops(self) -> int:
        return sum(r.flops for r in self.recomputed)

    def summary(self) -> str:
        budget = "" if self.memory_budget is None else f" (memory budget {self.memory_budget:g})"
        return (f"{self.partitioner}{budget}: saved {len(self.saved)} values, {self.saved_bytes:,} bytes of "
                f"activations; recomputed {len(self.recomputed)} ops, ~{self.recompute_flops:,} FLOPs")

    def __str__(self) -> str:
        rows = [(f"saved {s.name}", f"{s.dtype}[{', '.join(map(str, s.shape))}]",
                 f"{s.nbytes:,} B" if not s.free else f"{s.kind}, free") for s in self.saved]
        costly = [r for r in self.recomputed if r.flops]
        rows += [(f"recomputed {', '.join(r.outputs)}", r.op, f"~{r.flops:,} FLOPs") for r in costly]
        widths = [max((len(r[k]) for r in rows), default=0) for k in range(2)]
        lines = [self.summary()]
        lines += [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c}" for a, b, c in rows]
        free = [o for r in self.recomputed if not r.flops for o in r.outputs]
        if free:
            lines.append(f"  recomputed for free (views, sizes): {', '.join(free)}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def make_report(info: JointInfo, cut: Split, partitioner: str, memory_budget: float | None = None,
                notes: tuple[str, ...] = ()) -> PartitionReport:
    graph, sizes = info.graph, hints(info.graph)
    values = {**graph.values, **cut.forward.values}
    primals = set(info.primals)
    saved = []
    for name in cut.saved:
        v = values[name]
        kind = ("input" if name in primals else "input view" if name in info.input_views
                else "output" if name in info.held_outputs else "activation")
        saved.append(SavedValue(name, v.dtype, tuple(v.shape), nbytes(v, sizes), kind))
    nodes = [graph.nodes[i] for i in cut.recomputed]
    recomputed = tuple(RecomputedOp(n.outputs, n.op, recompute_flops(n, graph, sizes)) for n in nodes)
    return PartitionReport(partitioner, tuple(saved), recomputed, memory_budget, notes)
