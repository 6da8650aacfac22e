"""Events: what every stage reports to observers through the `ember_event` hook.

An `Event` has a kind (a stable name from `EVENT_KINDS`), the stage that sent it, a line for people, the graph and
source text a dump writes, simple values in `data` (strings, numbers, lists of them) and, for the kinds that carry
stage objects, a typed `payload`: one of the frozen dataclasses below, named in the kind's `EventKind.payload`.
Observers read objects through the payload's fields (or `event.get(name)`, which also reads `data`).
An event that reports a stage's work carries its wall time as `data["seconds"]`, measured with a `Stopwatch`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # payloads hold stage objects; events import nothing of the parts that make them
    from ..graph import Graph
    from ..plugins import CompiledGraph, JointGraph, Partition

# ---------------------------------------------------------------------------------------------- payloads


@dataclass(frozen=True, slots=True)
class JointTraced:
    """Payload of `joint_traced`: the autograd implementation `autograd` traced `joint` from `graph` (the captured
    graph after the post-capture passes). The event's `graph` is `joint.graph`."""

    joint: JointGraph
    graph: Graph
    autograd: str


@dataclass(frozen=True, slots=True)
class Partitioned:
    """Payload of `partitioned`: the partitioner `partitioner` split `joint` into `partition` (after the
    post-partition passes). The event's `graph` is the forward graph and its `source` the report's text."""

    joint: JointGraph
    partition: Partition
    partitioner: str

    @property
    def forward(self) -> Graph:
        return self.partition.forward

    @property
    def backward(self) -> Graph:
        return self.partition.backward

    @property
    def saved(self) -> tuple[str, ...]:
        return self.partition.saved

    @property
    def report(self) -> Any:
        return self.partition.report


@dataclass(frozen=True, slots=True)
class GraphCompiled:
    """Payload of `graph_compiled`: what the codegen returned. The event's `graph` and `source` are its own."""

    compiled: CompiledGraph

    @property
    def codegen(self) -> str:
        return self.compiled.codegen


@dataclass(frozen=True, slots=True)
class Reused:
    """Payload of `disk_cache_hit`: the result a stage took from its disk cache instead of computing it (the
    runtime's `Partition`, lowering's `KernelPlan`), so that observers can show it as they show a computed one
    (ember-partition draws a reused partition's diagram)."""

    result: Any


# ---------------------------------------------------------------------------------------------- kinds


@dataclass(frozen=True, slots=True)
class EventKind:
    """One documented kind: the EMBER_LOGS artifact that shows it, what it means, and its payload type (None:
    the event carries `graph`, `source` and `data` only)."""

    name: str
    artifact: str
    meaning: str
    payload: type | None = None


_KINDS = (
    EventKind("graph_captured", "graphs", "a frontend captured a graph (capture)"),
    EventKind("graph_break", "graphs", "a frontend split a function at a graph break (capture)"),
    EventKind("pass_applied", "graphs", "a graph pass changed a graph (runtime, stage `passes`); data: pass, "
              "plugin, point, nodes_before, nodes_after"),
    EventKind("graph_frozen", "graphs", "freezing made an inference graph's parameters and buffers constants and "
              "folded them (runtime, stage `freezing`); data: frozen, folded_constants, folded_batch_norms, "
              "prepacked_weights, fused_epilogues, reason (`first call`, or the input whose tensor changed), seconds"),
    EventKind("graph_specialized", "graphs", "a training graph whose joint trace fixed some of its symbols was "
              "compiled for the values of a call (runtime); data: values, builds (how many so far), reason"),
    EventKind("graph_compiled", "graphs", "a codegen compiled a graph (runtime, stage `codegen`)", GraphCompiled),
    EventKind("joint_traced", "joint", "autograd traced a joint forward+backward graph (runtime, stage `autograd`)",
              JointTraced),
    EventKind("partitioned", "partition", "a partitioner split a joint graph (runtime, stage `partition`)",
              Partitioned),
    EventKind("kernels_planned", "kernels", "lowering planned a graph's kernels; source: the plan's text"),
    EventKind("kernels_generated", "kernels", "a codegen generated a graph's kernels; source: the generated code"),
    EventKind("guards_built", "guards", "a frontend built the guards of a compiled entry; source: their text"),
    EventKind("guard_failed", "guards", "a guard failed on a call (logged with the guards: the recompile it causes "
              "logs the same reason under `recompiles`, once)"),
    EventKind("recompiled", "recompiles", "a function was compiled again for new inputs"),
    EventKind("fallback", "recompiles", "something runs a slower way (eagerly, in the interpreter); data: reason, "
              "cause (one of FALLBACK_CAUSES)"),
    EventKind("backward_captured", "compiled_autograd", "compiled autograd captured a whole backward at run time "
              "(runtime, stage `compiled_autograd`); data: reasons (the engine's, for a capture after the first), "
              "calls, capture"),
    EventKind("cuda_graph_recorded", "graphs", "a compiled graph was recorded as a CUDA graph for a kind of call "
              "(mode reduce-overhead; stage `cudagraphs`); data: kinds, recordings"),
    EventKind("kernel_tuned", "autotune", "a codegen measured a kernel's variants and kept the fastest (a max-autotune "
              "mode); data: kernel, key, choice, candidates, seconds (each candidate's best launch)"),
    EventKind("graph_cache_hit", "cache", "the runtime reused a compiled graph from its in-process cache"),
    EventKind("graph_cache_miss", "cache", "the runtime compiled a graph and stored it in its in-process cache"),
    EventKind("build_cache_hit", "cache", "a codegen found a graph's build in its disk cache; data: origin (`local`, "
              "or the remote cache it came from)"),
    EventKind("build_cache_miss", "cache", "a codegen built a graph and stored the build in its disk cache; "
              "data: reason"),
    EventKind("kernels_built", "kernels", "a codegen's build of a graph's kernels (a build-cache miss) finished and "
              "was bound on the graph's first call; data: seconds (the build, queued to done), waited (how long "
              "that call waited for it)"),
    EventKind("disk_cache_hit", "cache", "a stage took its result for a graph from its disk cache of stage results "
              "(`ember_core.ResultCache`: the runtime's `partitions`, lowering's `plans`) instead of computing it; "
              "data: cache, key, file, origin (`local`, or the remote cache it came from)", Reused),
    EventKind("disk_cache_miss", "cache", "a stage's disk cache of stage results had no usable entry for a graph, "
              "so the stage computes it (and stores it); data: cache, key, reason (`not cached`, or what is wrong "
              "with the entry, naming the file)"),
)
EVENT_KINDS: dict[str, EventKind] = {k.name: k for k in _KINDS}

# Why a `fallback` event's code runs a slower way: its `data["cause"]`. `build` is never routine: with a compiler
# installed, generated code that does not build is a codegen bug, and ember's tests fail on it
# (`ember_core.testing.FallbackRecorder`, the `no_build_failures` fixture).
FALLBACK_CAUSES: dict[str, str] = {
    "build": "a codegen's generated code did not build or load; the graph runs in the interpreter codegen",
    "lowering": "lowering the graph to loop IR failed; the graph runs in the interpreter codegen",
    "print": "a codegen cannot print the graph's kernels or wrapper; the graph runs in the interpreter codegen",
    "kernel": "a codegen cannot print one kernel; it runs in the loop-IR interpreter, the rest natively",
    "device": "no kernels for the plan's device in this codegen; the graph runs in the interpreter codegen",
    "eager": "a frontend runs a graph or function eagerly (a construct it cannot capture, the recompile limit)",
    "cudagraphs": "a call that mode reduce-overhead cannot replay as a CUDA graph runs the compiled graph's kernels "
                  "one by one (a CPU input, random ops, every recording's outputs still held, a failed recording)",
    "autograd": "a gradient that compiled kernels cannot give runs through ATen under eager autograd (double "
                "backward, a joint graph that cannot be traced faithfully)",
    "freezing": "a graph freezing was on for runs unfrozen from then on: its parameters kept changing (refrozen too "
                "often), or a freezing pass raised",
    "input": "an input is a negated or conjugated view (its sign bit ATen applies as it reads, compiled kernels would "
             "not); the graph runs in the interpreter codegen",
}

# kind → the EMBER_LOGS artifact that shows it. A kind outside this table is shown under its own name.
ARTIFACTS: dict[str, str] = {k.name: k.artifact for k in _KINDS}


# ---------------------------------------------------------------------------------------------- the event


@dataclass(frozen=True, slots=True)
class Event:
    """One stage's result. `message` is a line for people; `graph` and `source` carry what a dump writes; `data`
    holds simple values; `payload` the kind's typed object (see `EVENT_KINDS`), when it has one."""

    kind: str
    stage: str
    message: str = ""
    graph: Any = None  # an ember_core.Graph, when the event is about one
    source: str | None = None  # generated code, guards text ...
    data: dict[str, Any] = field(default_factory=dict)
    payload: Any = None

    def __post_init__(self) -> None:
        spec = EVENT_KINDS.get(self.kind)
        want = spec.payload if spec is not None else None
        if self.payload is not None and want is not None and not isinstance(self.payload, want):
            raise TypeError(f"event {self.kind!r} carries a {want.__name__} payload, "
                            f"got {type(self.payload).__name__}")

    @property
    def artifact(self) -> str:
        return ARTIFACTS.get(self.kind, self.kind)

    def get(self, name: str, default: Any = None) -> Any:
        """The payload's field (or property) `name`, else `data[name]`, else `default`: one way to read both."""
        if self.payload is not None and hasattr(self.payload, name):
            return getattr(self.payload, name)
        return self.data.get(name, default)


# ---------------------------------------------------------------------------------------------- durations


class Stopwatch:
    """The wall time of a stage, for the `data["seconds"]` of the event that reports it. Every stage times itself
    this one way: `with Stopwatch() as clock: ...`, then `clock.seconds` (read inside the block: the time so far)."""

    __slots__ = ("_start", "_stop")

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._stop: float | None = None

    def __enter__(self) -> Stopwatch:
        self._start, self._stop = time.perf_counter(), None
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = time.perf_counter()

    @property
    def seconds(self) -> float:
        end = self._stop if self._stop is not None else time.perf_counter()
        return round(end - self._start, 6)


def break_site(message: str, data: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """What makes two `graph_break` events one break: (reason, where, code). A frame that recompiles reports its
    breaks again; explain, the report and the logs count each site once."""
    return (data.get("reason") or message, data.get("where") or None, data.get("code") or None)

