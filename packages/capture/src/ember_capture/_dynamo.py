"""The `dynamo` frontend: torch._dynamo captures FX graphs (guards, graph breaks, recompiles); ember does the rest.

Each FX graph Dynamo hands over is made a functional ATen `Graph` (`capture_graph`), compiled once with
`compile_graph`, and wrapped in a `GraphRunner`, which Dynamo then calls with the flat real inputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from ember_core import EmberError
from torch._guards import CompileContext, TracingContext, detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor

from ._aten import capture_graph
from ._options import options_of
from ._report import qualname, report
from ._runner import GraphRunner

PRODUCER = "ember-capture 0.1.0 dynamo"


def _fake_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any], fake_mode) -> list[Any]:
    """The graph's inputs as fakes of the backend's fake mode, with the symbolic sizes Dynamo gave them."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    context = TracingContext.try_get()
    known = context.tensor_to_context if context is not None else {}  # tensor → Dynamo's symbolic context
    fakes = []
    with fake_mode:
        for node, x in zip(placeholders, example_inputs):
            dynamo_value = node.meta.get("example_value")
            if isinstance(x, FakeTensor):
                fakes.append(x if x.fake_mode is fake_mode else fake_mode.from_tensor(x))
            elif isinstance(x, torch.Tensor):
                sym = known.get(x)
                fakes.append(fake_mode.from_tensor(x, symbolic_context=sym, source=getattr(sym, "tensor_source", None),
                                                   trace=sym is None))
            elif isinstance(dynamo_value, torch.SymInt) and dynamo_value.node.shape_env is fake_mode.shape_env:
                fakes.append(dynamo_value)
            else:
                fakes.append(x)
    return fakes


def _break_source(reason: Any) -> tuple[str, str]:
    """(file:line, code) of the user's line where Dynamo broke the graph."""
    frames = getattr(reason, "user_stack", None) or []
    if not frames:
        return "?", ""
    return f"{frames[-1].filename}:{frames[-1].lineno}", (frames[-1].line or "").strip()


def _guards_text(guards: Any) -> str:
    lines = []
    for g in guards:
        codes = getattr(g, "code_list", None)
        lines.extend(codes if codes else [f"{g.name}: {g.create_fn_name()}"])
    return "\n".join(lines)


class DynamoBackend:
    """A Dynamo backend, `backend(gm, example_inputs) -> callable`: what `torch.compile(backend='ember')` calls."""

    def __init__(self, compile_graph: Callable, options: Mapping[str, Any] | None = None):
        self.compile_graph = compile_graph
        self.options = options_of(options)
        self.last_failure: str | None = None  # set by the guard_fail_fn of `DynamoFrontend.wrap`
        self._count = itertools.count()

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        compile_id = CompileContext.current_compile_id()
        name = f"dynamo_{compile_id}".replace("/", "_").replace("[", "").replace("]", "") if compile_id else \
            f"dynamo_{next(self._count)}"
        self._report_break(gm)
        if compile_id is not None and getattr(compile_id, "frame_compile_id", 0):
            report("recompiled", self.last_failure or "Dynamo recompiled the frame", compile_id=str(compile_id))
        fake_mode = detect_fake_mode(example_inputs)
        fakes = _fake_inputs(gm, example_inputs, fake_mode)
        try:
            graph = capture_graph(gm, fakes, name=name, producer=PRODUCER, fake_mode=fake_mode)
        except EmberError as e:  # a construct the graph cannot hold: this graph runs eagerly
            report("fallback", f"graph {name} runs eagerly: {e}", graph_name=name, reason=str(e), cause="eager")
            return gm.forward
        report("graph_captured", f"captured graph {name} ({len(graph.nodes)} nodes)", graph=graph)
        runner = GraphRunner(graph, self.compile_graph(graph, fakes))
        direct = runner.passthrough
        if direct is not None:
            def run(*args: Any) -> list:
                return direct(args)
        else:
            def run(*args: Any) -> list:
                return runner(list(args))

        run.graph = graph  # type: ignore[attr-defined]
        return run

    @staticmethod
    def _report_break(gm: fx.GraphModule) -> None:
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is None or not getattr(reason, "graph_break", False):
            return
        first = str(reason.reason).strip().splitlines()[0] if reason.reason else "graph break"
        where, code = _break_source(reason)
        report("graph_break", f"{where}: {first}" + (f"\n    {code}" if code else ""), reason=str(reason.reason),
               where=where, code=code)


class DynamoFrontend:
    """Frontend `dynamo`: `wrap(fn, compile_graph, options)` is `torch.compile(fn, backend=<ember>)`."""

    name = "dynamo"

    def backend(self, compile_graph: Callable, options: Mapping[str, Any] | None = None) -> DynamoBackend:
        return DynamoBackend(compile_graph, options)

    def wrap(self, fn: Callable, compile_graph: Callable, options: Mapping[str, Any] | None = None) -> Callable:
        opts = options_of(options)
        backend = self.backend(compile_graph, opts)
        label = qualname(fn)

        def guards_built(guards: Any) -> None:
            report("guards_built", f"guards of {label}", source=_guards_text(guards))

        def guard_failed(failure: Any) -> None:
            backend.last_failure = f"{failure.orig_code.co_name}: {failure.reason}"
            report("guard_failed", backend.last_failure)

        return torch._dynamo.optimize(backend, nopython=opts["fullgraph"], dynamic=opts["dynamic"],
                                      recompile_limit=opts["recompile_limit"], guard_export_fn=guards_built,
                                      guard_fail_fn=guard_failed)(fn)

