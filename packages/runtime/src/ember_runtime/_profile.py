"""`profile(fn, *args, **kwargs)`: how long each of ember's kernels takes in a call of `fn`, and how close it comes
to what the machine can do.

`fn` runs as given when ember's kernels run in it: what `ember.compile` (or `torch.compile(backend="ember")`)
returned, or a plain function that calls it, such as a training step (forward, loss, backward, optimizer step).
A function in which no ember kernel runs is compiled with `ember.compile(fn)` and profiled again.

A profile is `warmup` untimed calls (the first compiles), `runs` calls timed end to end (the step time), then
`runs` calls under `torch.profiler`. While a profiler records, every compiled graph runs its profiled twin, with
one range per graph and per kernel and extern call (see `ember_core.profile_range`); this reads those ranges.
For each kernel: calls per run, the median time per call (on the CPU the time its range spans; on CUDA the GPU
time of what it launched), the bytes it moves and FLOPs it does from its plan (`ember_core.KernelCost`), the
bandwidth or FLOP rate that makes, and its fraction of the machine's limit (`machine_limits`: a large copy's
bandwidth, a large mm's FLOP rate, measured once per process). The rows and the table are in the returned
`ProfileReport`; `profile` prints the table.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import torch
from ember_core import GraphCosts, costs_of

from ._compile import compile
from ._compiled_marks import is_compiled
from ._limits import Limits, machine_limits


@dataclass(frozen=True)
class KernelTiming:
    """One kernel or extern call of one graph. `calls`: per run of the profiled function; `seconds`: the median
    per call; `bytes`, `flops`: per call, from the plan; `fraction`: of the limit that bounds it (the mm FLOP
    rate for an extern whose FLOPs are counted, else the copy bandwidth)."""

    graph: str
    name: str
    kind: str
    op: str
    device: str
    calls: float
    seconds: float
    bytes: int
    flops: int
    fraction: float

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def flop_rate(self) -> float:
        """FLOPs per second (0 where FLOPs are not counted)."""
        return self.flops / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class GraphTiming:
    """One compiled graph: calls per run, the median time per call of its whole wrapper, its codegen."""

    graph: str
    codegen: str
    device: str
    calls: float
    seconds: float


@dataclass
class ProfileReport:
    """What `profile` measured. `result` is the profiled function's result (of its last call); `compiled` says
    whether profile compiled the function itself."""

    kernels: list[KernelTiming]
    graphs: list[GraphTiming]
    runs: int
    step_seconds: float
    limits: dict[str, Limits]
    result: Any = field(repr=False, default=None)
    compiled: bool = False

    def table(self) -> str:
        return format_report(self)

    def __str__(self) -> str:
        return self.table()


class Profiler:
    """`Profiler(warmup=2, runs=10, show=True, file=None, options=None)(fn, *args, **kwargs)`: `profile` with other
    settings. `show=False` prints nothing; `file` is where the table goes (default: sys.stdout at the time);
    `options` are ember.compile's, for a function that profile compiles."""

    def __init__(self, warmup: int = 2, runs: int = 10, show: bool = True, file: IO[str] | None = None,
                 options: Mapping[str, Any] | None = None):
        if warmup < 1 or runs < 1:
            raise ValueError("profile needs at least one warm-up call and one run")
        self.warmup, self.runs, self.show, self.file, self.options = warmup, runs, show, file, options

    def __call__(self, fn: Callable, *args: Any, **kwargs: Any) -> ProfileReport:
        report = self.measure(fn, args, kwargs)
        if not report.graphs and not is_compiled(fn):
            report = self.measure(compile(fn, options=self.options), args, kwargs)
            report.compiled = True
        if self.show:
            print(report.table(), file=self.file or sys.stdout)
        return report

    def measure(self, fn: Callable, args: tuple, kwargs: Mapping[str, Any]) -> ProfileReport:
        for _ in range(self.warmup):
            fn(*args, **kwargs)
        _sync()
        steps = []
        for _ in range(self.runs):
            start = time.perf_counter()
            fn(*args, **kwargs)
            _sync()
            steps.append(time.perf_counter() - start)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(self.runs):
                result = fn(*args, **kwargs)
            _sync()
        kernels, graphs, limits = collect(prof.events(), self.runs)
        return ProfileReport(kernels, graphs, self.runs, statistics.median(steps), limits, result)


def profile(fn: Callable, *args: Any, **kwargs: Any) -> ProfileReport:
    """Profile `fn(*args, **kwargs)` kernel by kernel, print the table and return it as data (see the module's
    docstring; `Profiler` takes other settings)."""
    return Profiler()(fn, *args, **kwargs)


# ---------------------------------------------------------------------------------------------- reading events


def collect(events: list, runs: int) -> tuple[list[KernelTiming], list[GraphTiming], dict[str, Limits]]:
    """The rows of a profile from a profiler's events: each ember graph range (by its label) and each kernel
    range inside one, in the order they first ran."""
    graphs: dict[str, GraphCosts] = {}  # held while reading: the table only keeps live graphs
    graph_times: dict[str, list[float]] = {}
    kernel_times: dict[tuple[str, str], list[float]] = {}
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    for e in sorted(cpu, key=lambda e: e.time_range.start):
        costs = graphs.get(e.name) or costs_of(e.name)
        if costs is not None:
            graphs[e.name] = costs
            if _enclosing_graph(e, graphs) is not costs:  # not a call of itself (after relaying out its inputs)
                graph_times.setdefault(e.name, []).append(_seconds(e))
            continue
        owner = _enclosing_graph(e, graphs)
        if owner is not None and owner.kernel(e.name) is not None:
            kernel_times.setdefault((owner.label, e.name), []).append(_seconds(e))
    limits = {c.device: machine_limits(c.device) for c in graphs.values()}
    kernels = [_kernel_row(graphs[label], name, times, runs, limits) for (label, name), times in kernel_times.items()]
    rows = [GraphTiming(_short(label), graphs[label].codegen, graphs[label].device, len(t) / runs,
                        statistics.median(t)) for label, t in graph_times.items()]
    return kernels, rows, limits


def _enclosing_graph(event: Any, graphs: dict[str, GraphCosts]) -> GraphCosts | None:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in graphs:
            return graphs[parent.name]
        parent = parent.cpu_parent
    return None


def _seconds(event: Any) -> float:
    """On an accelerator, the device time of the kernels launched inside the range; on the host (which records no
    device time), the range's own span."""
    on_device = event.device_time_total
    if on_device > 0:
        return on_device * 1e-6
    return event.time_range.elapsed_us() * 1e-6


def _kernel_row(costs: GraphCosts, name: str, times: list[float], runs: int, limits: dict[str, Limits]
                ) -> KernelTiming:
    cost = costs.kernel(name)
    assert cost is not None
    seconds = statistics.median(times)
    limit = limits[costs.device]
    if cost.flops:
        peak, achieved = limit.flops(cost.dtype or "float32"), cost.flops / seconds if seconds else 0.0
    else:
        peak, achieved = limit.bandwidth, cost.bytes / seconds if seconds else 0.0
    return KernelTiming(_short(costs.label), name, cost.kind, cost.op, costs.device, len(times) / runs, seconds,
                        cost.bytes, cost.flops, achieved / peak if peak else 0.0)


def _short(label: str) -> str:
    return label.removeprefix("ember:")


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------- the table


def format_report(report: ProfileReport) -> str:
    """The table `profile` prints: a line per kernel, a line per graph, the machine's limits."""
    head = (f"ember.profile: {_time(report.step_seconds)} per call of the function (median of {report.runs}); "
            f"graphs: {len(report.graphs)}, kernels and extern calls: {len(report.kernels)}"
            + (" (the function was compiled by profile)" if report.compiled else ""))
    if not report.kernels:
        return head + "\nno ember kernel ran (graphs that fell back to the interpreter codegen have none)"
    rows = [("graph", "kernel", "calls", "time", "bytes", "GB/s", "GFLOP/s", "of limit")]
    for k in report.kernels:
        rows.append((k.graph, k.name, f"{k.calls:g}", _time(k.seconds), _bytes(k.bytes), f"{k.bandwidth / 1e9:.2f}",
                     f"{k.flop_rate / 1e9:.2f}" if k.flops else "-", f"{100 * k.fraction:.1f}%"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    right = {2, 3, 4, 5, 6, 7}
    lines = [head]
    for r in rows:
        lines.append("  ".join(v.rjust(w) if c in right else v.ljust(w) for c, (v, w) in enumerate(zip(r, widths)))
                     .rstrip())
    for g in report.graphs:
        inside = sum(k.seconds * k.calls for k in report.kernels if k.graph == g.graph) / max(g.calls, 1e-12)
        lines.append(f"graph {g.graph} ({g.codegen}, {g.device}): {g.calls:g}x per run, {_time(g.seconds)} per call, "
                     f"{_time(inside)} of it in kernels and extern calls")
    for device, limit in report.limits.items():
        mm = ", ".join(f"{v / 1e9:.1f} GFLOP/s mm {d}" for d, v in limit.measured_flops().items() if v)
        lines.append(f"limits of {device}: {limit.bandwidth / 1e9:.1f} GB/s copy" + (f", {mm}" if mm else ""))
    return "\n".join(lines)


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
