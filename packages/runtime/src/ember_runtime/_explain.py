"""`explain(fn, **compile_kwargs)(*args, **kwargs)`: what ember did with a function, as data and as text.

The explainer compiles `fn` with `compile(fn, **compile_kwargs)`, runs it on the arguments while recording ember's
events, and reads its report from those events alone, so it reads every frontend the same way: the graphs captured
and their ops, the graph breaks at the user's lines, the guards of each compiled entry, the recompiles with their
reasons, and every fallback. Calling the explainer again calls the same compiled function again (a call with new
shapes shows its recompile); each call returns the report of every call so far.

Like `torch._dynamo.explain`, the first call starts from nothing: under the `dynamo` frontend it resets Dynamo
(functions that Dynamo compiled before compile again on their next call), and it empties the runtime's in-memory
cache of compiled graphs, so that each graph's codegen runs and reports again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from ember_core import WARNED_CAUSES, Event, Graph, break_site, record_events

from ._compile import compile
from ._pipeline import Pipeline, clear_cache

_GUARDS_SHOWN = 20  # per entry in the text; the data holds them all


@dataclass(frozen=True)
class CapturedGraph:
    """A graph a frontend captured: its ops by how many nodes call each (most frequent first) and the codegen that
    compiled it (None when no codegen compiled a graph of that name: a training graph is compiled as its forward
    and backward halves)."""

    name: str
    ops: dict[str, int]
    graph: Graph
    codegen: str | None = None

    @property
    def op_count(self) -> int:
        return sum(self.ops.values())

    def __str__(self) -> str:
        how = f", compiled by {self.codegen}" if self.codegen else ""
        ops = ", ".join(f"{op} x{n}" for op, n in self.ops.items()) or "no ops"
        return f"{self.name}{how}: {self.op_count} ops: {ops}"


@dataclass(frozen=True)
class GraphBreak:
    """Where a frontend stopped capturing, and why. `where` is the user's `file:line`, `code` that line's text.
    `eager`: the whole function runs eagerly from then on (the `trace` frontend makes one graph or none), rather
    than being split into graphs around the break (`dynamo`)."""

    reason: str
    where: str | None = None
    code: str | None = None
    eager: bool = False

    @property
    def summary(self) -> str:
        """The reason's first line, with Dynamo's `Explanation:` line when it gives one."""
        lines = [ln.strip() for ln in self.reason.strip().splitlines() if ln.strip()]
        if not lines:
            return "graph break"
        explanation = next((ln.removeprefix("Explanation:").strip() for ln in lines[1:]
                            if ln.startswith("Explanation:")), None)
        return f"{lines[0]} ({explanation})" if explanation else lines[0]

    def __str__(self) -> str:
        effect = "; the function runs eagerly" if self.eager else ""
        text = f"{self.where or 'unknown line'}: {self.summary}{effect}"
        return text + (f"\n    {self.code}" if self.code else "")


@dataclass(frozen=True)
class EntryGuards:
    """The guards of one compiled entry (a `trace` entry, a Dynamo frame compile): one condition per guard, all of
    which hold while calls use the entry, and the frontend's own text of them."""

    entry: str
    guards: tuple[str, ...]
    source: str = ""


@dataclass(frozen=True)
class Recompile:
    """A compile after the first, and the guard failure that caused it."""

    reason: str
    function: str | None = None


@dataclass(frozen=True)
class Fallback:
    """Something that runs a slower way: `subject` is what (`function f`, `graph 'f_0'`), `stage` who reported it,
    `cause` one of `ember_core.FALLBACK_CAUSES`; `where`/`code` the user's line when known. `warned`: the cause is
    one that also warns (`ember_core.WARNED_CAUSES`)."""

    subject: str
    stage: str
    cause: str
    reason: str
    where: str | None = None
    code: str | None = None

    @property
    def warned(self) -> bool:
        return self.cause in WARNED_CAUSES

    def __str__(self) -> str:
        at = f" at {self.where}" if self.where else ""
        reason = self.reason.strip().splitlines()[0] if self.reason.strip() else ""
        if self.where:  # said once
            reason = reason.removeprefix(f"{self.where}: ")
        return f"[{self.cause}] {self.subject} ({self.stage}){at}: {reason}"


@dataclass
class ExplainOutput:
    """What ember did with a function over the calls explained. Fields are data; `str()` is a summary for people.
    `graph_count`, `graph_break_count`, `break_reasons`, `op_count`, `ops_per_graph` and `out_guards` are named as
    `torch._dynamo.explain`'s are. `events` holds every event recorded; `result` the last call's return value."""

    function: str
    frontend: str
    calls: int = 0
    graphs: list[CapturedGraph] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    guards: list[EntryGuards] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    guard_failures: list[str] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)
    compiled: dict[str, str] = field(default_factory=dict)  # graph name → the codegen that compiled it
    events: list[Event] = field(default_factory=list, repr=False)
    result: Any = field(default=None, repr=False)

    @classmethod
    def from_events(cls, events: Iterable[Event], *, function: str, frontend: str, calls: int = 0,
                    result: Any = None) -> ExplainOutput:
        out = cls(function, frontend, calls, events=list(events), result=result)
        for e in out.events:
            read = _READERS.get(e.kind)
            if read is not None:
                read(out, e)
        out.graphs = [CapturedGraph(g.name, g.ops, g.graph, out.compiled.get(g.name)) for g in out.graphs]
        return out

    # ------------------------------------------------------------------ torch._dynamo.explain's names

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.graph_breaks)

    @property
    def break_reasons(self) -> list[GraphBreak]:
        return self.graph_breaks

    @property
    def op_count(self) -> int:
        return sum(g.op_count for g in self.graphs)

    @property
    def ops_per_graph(self) -> list[list[str]]:
        """Per graph, the op of each node in order."""
        return [[n.op for n in g.graph.nodes] for g in self.graphs]

    @property
    def out_guards(self) -> list[str]:
        return [guard for entry in self.guards for guard in entry.guards]

    # ------------------------------------------------------------------ text

    def __str__(self) -> str:
        calls = f"{self.calls} call{'s' * (self.calls != 1)}"
        lines = [f"ember.explain: {self.function}, frontend {self.frontend}, {calls}",
                 f"{_count(self.graph_count, 'graph')}, {_count(self.graph_break_count, 'graph break')}, "
                 f"{_count(self.op_count, 'op')}, {_count(len(self.recompiles), 'recompile')}, "
                 f"{_count(len(self.fallbacks), 'fallback')}"]
        _section(lines, "Graphs", self.graphs)
        _section(lines, "Graph breaks", self.graph_breaks)
        others = {n: c for n, c in self.compiled.items() if n not in {g.name for g in self.graphs}}
        _section(lines, "Also compiled", [f"{n} by {c}" for n, c in others.items()])
        if self.guards:
            lines += ["", "Guards"]
            for entry in self.guards:
                lines.append(f"  {entry.entry}: {_count(len(entry.guards), 'guard')}")
                lines += [f"    {g}" for g in entry.guards[:_GUARDS_SHOWN]]
                if len(entry.guards) > _GUARDS_SHOWN:
                    lines.append(f"    ... {len(entry.guards) - _GUARDS_SHOWN} more")
        _section(lines, "Recompiles", [r.reason for r in self.recompiles])
        _section(lines, "Fallbacks", self.fallbacks)
        return "\n".join(lines)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _section(lines: list[str], title: str, items: list[Any]) -> None:
    if not items:
        return
    lines += ["", title]
    for k, item in enumerate(items, 1):
        first, *rest = str(item).splitlines() or [""]
        lines.append(f"  {k}. {first}")
        lines += [f"       {line.strip()}" for line in rest]


# ---------------------------------------------------------------------- reading events


def _graph_captured(out: ExplainOutput, e: Event) -> None:
    if isinstance(e.graph, Graph):
        ops = Counter(n.op for n in e.graph.nodes)
        out.graphs.append(CapturedGraph(e.graph.name, dict(ops.most_common()), e.graph))


def _graph_compiled(out: ExplainOutput, e: Event) -> None:
    if isinstance(e.graph, Graph):
        out.compiled[e.graph.name] = e.get("codegen") or ""


def _graph_break(out: ExplainOutput, e: Event) -> None:
    _add_break(out, GraphBreak(*break_site(e.message, e.data)))


def _add_break(out: ExplainOutput, found: GraphBreak) -> None:
    """A break is listed once: a recompile of the frame before it reports it again."""
    if found not in out.graph_breaks:
        out.graph_breaks.append(found)


def _guards_built(out: ExplainOutput, e: Event) -> None:
    entry = e.message.removeprefix("guards of ") or f"entry {len(out.guards)}"
    guards = e.get("guards")
    if guards is None:  # a frontend that gives only its text: one guard a line
        guards = [ln.strip() for ln in (e.source or "").splitlines() if ln.strip()]
    out.guards.append(EntryGuards(entry, tuple(guards), e.source or ""))


def _guard_failed(out: ExplainOutput, e: Event) -> None:
    out.guard_failures.append(e.get("reason") or e.message)


def _recompiled(out: ExplainOutput, e: Event) -> None:
    out.recompiles.append(Recompile(e.get("reason") or e.message, e.get("function")))


def _fallback(out: ExplainOutput, e: Event) -> None:
    if e.get("function"):
        subject = f"function {e.get('function')}"
    elif e.get("graph_name"):
        subject = f"graph {e.get('graph_name')!r}"
    elif isinstance(e.graph, Graph):
        subject = f"graph {e.graph.name!r}"
    else:
        subject = e.stage
    where, code = e.get("where"), e.get("code")
    out.fallbacks.append(Fallback(subject, e.stage, e.get("cause") or "", e.get("reason") or e.message, where, code))
    if e.get("break_reason"):  # a construct the frontend cannot capture: where its capture stopped
        _add_break(out, GraphBreak(e.get("break_reason"), where, code, eager=True))


_READERS: dict[str, Callable[[ExplainOutput, Event], None]] = {
    "graph_captured": _graph_captured, "graph_compiled": _graph_compiled, "graph_break": _graph_break,
    "guards_built": _guards_built, "guard_failed": _guard_failed, "recompiled": _recompiled, "fallback": _fallback,
}


# ---------------------------------------------------------------------- the explainer


class Explainer:
    """`fn` compiled with ember; each call runs it and returns the `ExplainOutput` of every call so far."""

    def __init__(self, fn: Callable, compile_kwargs: dict[str, Any]):
        if compile_kwargs.get("backend", "ember") != "ember":
            raise ValueError("explain reads ember's events: it compiles with backend 'ember' only")
        pipeline = Pipeline.from_options(compile_kwargs.get("options"), fullgraph=False, dynamic=None, mode=None)
        self.frontend: str = pipeline.options["frontend"]
        self.fn = fn
        self.compiled = compile(fn, **compile_kwargs)
        self.events: list[Event] = []
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> ExplainOutput:
        if self.calls == 0:
            if self.frontend == "dynamo":
                torch._dynamo.reset()
            clear_cache()
        self.calls += 1
        with record_events() as recorder:
            try:
                result = self.compiled(*args, **kwargs)
            finally:
                self.events += recorder.events
        return ExplainOutput.from_events(self.events, function=_name(self.fn), frontend=self.frontend,
                                         calls=self.calls, result=result)


def explain(fn: Callable, *args: Any, **compile_kwargs: Any) -> Any:
    """`explain(fn, **compile_kwargs)(*args, **kwargs) -> ExplainOutput`: compile `fn` with `ember.compile`'s
    arguments (`fullgraph`, `dynamic`, `mode`, `options` ...), call it, and report what ember did. The explainer
    may be called again; each report covers every call so far. `explain(fn, *args)` is short for `explain(fn)(*args)`.
    """
    explainer = Explainer(fn, compile_kwargs)
    return explainer(*args) if args else explainer


def _name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return name.rsplit("<locals>.", 1)[-1]
