"""What a report knows: the events of one process, gathered per compile.

A `Compile` is one graph a frontend captured and everything made of it: the post-capture passes, the joint graph
and the partition (training), and each graph a codegen compiled (`Compiled`: the inference graph, or the forward
and the backward), with its kernel plan, generated source, wrapper, build, and the seconds each stage took.
Events are matched to their compile by graph name (`graph_captured` opens a compile; its joint, forward and
backward names then point at it). Events of no graph (guards, recompiles, graph breaks) go to `Report.log` only;
every event goes there too, for the page's table of events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..events._events import Event, Reused
from ..graph._schema import Graph
from ..plugins._stages import JointGraph, Partition


@dataclass
class Compiled:
    """One graph a codegen compiled (or is compiling): role `inference`, `forward` or `backward`."""

    name: str
    role: str
    graph: Graph | None = None
    codegen: str = ""
    stage: str = ""  # the codegen's event stage, e.g. codegen-cpp
    plan: str | None = None
    steps: tuple[dict[str, Any], ...] = ()
    decisions: tuple[str, ...] = ()
    unit: str | None = None
    wrapper: str | None = None
    source: str | None = None  # graph_compiled's: the whole generated source (or the interpreter's Python)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Compile:
    """One captured graph and all that came of it."""

    number: int
    name: str
    captured: Graph | None = None
    passes: list[Event] = field(default_factory=list)
    joint: JointGraph | None = None
    autograd: str = ""
    partition: Partition | None = None
    partitioner: str = ""
    partition_report: str | None = None
    graphs: dict[str, Compiled] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    version: int = 0  # bumped on every change: the page renders a compile again only when it changed

    @property
    def training(self) -> bool:
        return self.joint is not None or any(g.role != "inference" for g in self.graphs.values())

    def compiled(self, name: str) -> Compiled:
        found = self.graphs.get(name)
        if found is None:
            found = self.graphs[name] = Compiled(name, self._role(name))
        return found

    def _role(self, name: str) -> str:
        if self.partition is not None:
            return {self.partition.forward.name: "forward", self.partition.backward.name: "backward"}.get(
                name, "inference")
        for role in ("forward", "backward"):  # a partition from the disk cache: known by name only
            if name != self.name and name.endswith("_" + role):
                return role
        return "inference"

    def total_seconds(self) -> float:
        own = sum(self.seconds.values())
        return own + sum(g.seconds.get(k, 0.0) for g in self.graphs.values() for k in ("compile", "build"))


@dataclass(frozen=True, slots=True)
class LogEntry:
    """An event as the page's tables show it: when (seconds since the report started), what, which compile."""

    at: float
    kind: str
    stage: str
    message: str
    seconds: float | None
    compile: int | None
    source: str | None = None  # guards' text, a partition report ...
    data: tuple[tuple[str, str], ...] = ()


class Report:
    """Gathers events (`add`) into compiles and a log; `version` changes whenever something was added."""

    MAX_LOG = 5000  # events kept for the table; older ones are counted, not kept

    def __init__(self) -> None:
        self.started = time.time()
        self.compiles: list[Compile] = []
        self.log: list[LogEntry] = []
        self.dropped = 0
        self.version = 0
        self._owner: dict[str, Compile] = {}  # graph name → its compile (the latest of that name)

    def add(self, event: Event) -> None:
        handler = _HANDLERS.get(event.kind)
        owner = handler(self, event) if handler is not None else self._by_graph(event)
        if owner is not None:
            owner.version += 1
        self._log(event, owner)
        self.version += 1

    def counts(self) -> dict[str, int]:
        """How many events of each kind were seen (kept in the log or not)."""
        found: dict[str, int] = {}
        for entry in self.log:
            found[entry.kind] = found.get(entry.kind, 0) + 1
        return found

    # ------------------------------------------------------------------ matching events to compiles

    def _by_graph(self, event: Event) -> Compile | None:
        name = _graph_name(event)
        return self._owner.get(name) if name else None

    def _open(self, name: str) -> Compile:
        compile_ = Compile(len(self.compiles) + 1, name)
        self.compiles.append(compile_)
        self._owner[name] = compile_
        return compile_

    def _compiled(self, event: Event) -> tuple[Compile, Compiled] | None:
        """The compile and compiled graph an event is about; a graph no capture announced opens a compile."""
        name = _graph_name(event)
        if not name:
            return None
        owner = self._find(name) or self._open(name)
        return owner, owner.compiled(name)

    def _find(self, name: str) -> Compile | None:
        return self._owner.get(name) or self._by_prefix(name)

    def _by_prefix(self, name: str) -> Compile | None:
        """A partition read from the disk cache sends no `partitioned` event: its forward and backward are then
        known only by their names, which start with the captured graph's (`dynamo_0_0_joint_forward`)."""
        for owner in reversed(self.compiles):
            if owner.partition is None and name.startswith(owner.name + "_"):
                self._owner[name] = owner
                return owner
        return None

    def _log(self, event: Event, owner: Compile | None) -> None:
        if len(self.log) >= self.MAX_LOG:
            self.dropped += 1
            return
        seconds = event.data.get("seconds")
        data = tuple((k, str(v)) for k, v in event.data.items() if k not in _BULKY and isinstance(v, (str, int, float)))
        self.log.append(LogEntry(time.time() - self.started, event.kind, event.stage, event.message,
                                 seconds if isinstance(seconds, (int, float)) else None,
                                 owner.number if owner is not None else None,
                                 event.source if event.kind in _KEEP_SOURCE else None, data))


_BULKY = {"unit", "wrapper", "steps", "decisions"}
_KEEP_SOURCE = {"guards_built", "graph_break", "backward_captured"}


def _graph_name(event: Event) -> str | None:
    graph = event.graph
    if isinstance(graph, Graph):
        return graph.name
    for key in ("graph", "graph_name"):
        if isinstance(event.data.get(key), str):
            return event.data[key]
    return None


def _seconds(event: Event) -> float | None:
    s = event.data.get("seconds")
    return float(s) if isinstance(s, (int, float)) else None


def _add_time(times: dict[str, float], stage: str, event: Event) -> None:
    s = _seconds(event)
    if s is not None:
        times[stage] = times.get(stage, 0.0) + s


# ---------------------------------------------------------------------------------------------- handlers


def _captured(report: Report, event: Event) -> Compile:
    owner = report._open(event.graph.name)
    owner.captured = event.graph
    _add_time(owner.seconds, "capture", event)
    return owner


def _pass_applied(report: Report, event: Event) -> Compile | None:
    owner = report._by_graph(event)
    if owner is not None:
        owner.passes.append(event)
        _add_time(owner.seconds, "passes", event)
    return owner


def _joint_traced(report: Report, event: Event) -> Compile:
    traced = event.payload
    owner = report._owner.get(traced.graph.name) or report._open(traced.graph.name)
    owner.joint, owner.autograd = traced.joint, traced.autograd
    report._owner[traced.joint.graph.name] = owner
    _add_time(owner.seconds, "autograd", event)
    return owner


def _partitioned(report: Report, event: Event) -> Compile:
    split = event.payload
    name = split.joint.graph.name
    owner = report._owner.get(name) or report._open(name)
    owner.joint = owner.joint or split.joint
    owner.partition, owner.partitioner = split.partition, split.partitioner
    owner.partition_report = event.source
    for graph in (split.forward, split.backward):
        report._owner[graph.name] = owner
        owner.compiled(graph.name).graph = graph
    _add_time(owner.seconds, "partition", event)
    return owner


def _on_compiled(update: Callable[[Compile, Compiled, Event], None]) -> Callable[[Report, Event], Compile | None]:
    def handler(report: Report, event: Event) -> Compile | None:
        found = report._compiled(event)
        if found is None:
            return None
        update(found[0], found[1], event)
        return found[0]

    return handler


def _planned(owner: Compile, graph: Compiled, event: Event) -> None:
    graph.plan = event.source
    graph.steps = tuple(s for s in event.data.get("steps", ()) if isinstance(s, dict))
    graph.decisions = tuple(str(d) for d in event.data.get("decisions", ()))
    _add_time(graph.seconds, "lowering", event)


def _generated(owner: Compile, graph: Compiled, event: Event) -> None:
    graph.graph = graph.graph or event.graph
    graph.stage = event.stage
    graph.unit, graph.wrapper = event.data.get("unit"), event.data.get("wrapper")
    _add_time(graph.seconds, "codegen", event)


def _graph_compiled(owner: Compile, graph: Compiled, event: Event) -> None:
    graph.graph = event.graph
    graph.codegen = event.get("codegen") or ""
    graph.source = event.source
    _add_time(graph.seconds, "compile", event)


def _built(owner: Compile, graph: Compiled, event: Event) -> None:
    _add_time(graph.seconds, "build", event)
    graph.notes.append(event.message)


def _noted(owner: Compile, graph: Compiled, event: Event) -> None:
    graph.notes.append(f"{event.kind}: {event.message}")


def _note(report: Report, event: Event) -> Compile | None:
    """An event about a compile or one of its compiled graphs (a fallback, a disk-cache lookup): noted there."""
    name = _graph_name(event)
    owner = report._find(name) if name else None
    if owner is None:
        return None
    if name != owner.name and name not in owner.graphs and owner.partition is None:
        owner.compiled(name)  # a forward or backward of a partition from the disk cache
    notes = owner.graphs[name].notes if name in owner.graphs else owner.notes
    notes.append(f"{event.kind}: {event.message}")
    return owner


def _cache_hit(report: Report, event: Event) -> Compile | None:
    """A disk-cache hit is noted; a kernel plan from lowering's cache is also the graph's plan (its text is the
    event's source), shown as a plan lowering made would be, and a partition from the runtime's cache is the
    compile's partition (no joint graph: the trace did not run), so a warm start's page is not missing either."""
    if isinstance(event.payload, Reused) and isinstance(event.payload.result, Partition) and event.graph is not None:
        return _reused_partition(report, event, event.payload.result)
    found = report._compiled(event) if event.stage == "lowering" and event.source else None
    if found is None:
        return _note(report, event)
    owner, graph = found
    graph.notes.append(f"{event.kind}: {event.message}")
    if graph.plan is None:
        graph.plan = event.source
        graph.steps = tuple(s for s in event.data.get("steps", ()) if isinstance(s, dict))
        graph.decisions = ("the plan came from the disk cache: lowering did not run in this process",)
    return owner


def _reused_partition(report: Report, event: Event, part: Partition) -> Compile:
    owner = report._owner.get(event.graph.name) or report._open(event.graph.name)
    origin = event.data.get("origin", "local")
    owner.partition, owner.partitioner = part, "the disk cache" if origin == "local" else f"the remote cache {origin}"
    owner.partition_report = str(part.report) if part.report is not None else None
    owner.notes.append(f"{event.kind}: {event.message}")
    for graph in (part.forward, part.backward):
        report._owner[graph.name] = owner
        owner.compiled(graph.name).graph = graph
    return owner


_HANDLERS: dict[str, Callable[[Report, Event], Compile | None]] = {
    "graph_captured": _captured,
    "pass_applied": _pass_applied,
    "joint_traced": _joint_traced,
    "partitioned": _partitioned,
    "kernels_planned": _on_compiled(_planned),
    "kernels_generated": _on_compiled(_generated),
    "graph_compiled": _on_compiled(_graph_compiled),
    "kernels_built": _on_compiled(_built),
    "build_cache_hit": _on_compiled(_noted),  # a miss is followed by `kernels_built`, noted there
    "graph_cache_hit": _on_compiled(_noted),
    "fallback": _note,
    "disk_cache_hit": _cache_hit,  # a stage skipped: worth a note; a miss (the stage ran) is in the caches table
    "cuda_graph_recorded": _on_compiled(_noted),
    "kernel_tuned": _on_compiled(_noted),
}
