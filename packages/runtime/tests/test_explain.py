"""`ExplainOutput` read from events alone (any frontend that sends ember's events), and `explain` over the toy
frontend, which sends none of the capture events: the report then holds what the runtime itself reported."""

from __future__ import annotations

import torch
from ember_core import Event, Graph, from_fx
from ember_runtime import ExplainOutput, GraphBreak, explain
from torch.fx.experimental.proxy_tensor import make_fx


def f(x):
    return torch.relu(x) * 2 + x.sin() * 3


def graph_of(fn, *args, name: str) -> Graph:
    return from_fx(make_fx(fn)(*args), name=name)


def events(graph: Graph) -> list[Event]:
    return [
        Event("graph_break", "capture", "model.py:3: unsupported", data={
            "reason": "Unsupported thing\n  Explanation: it cannot be traced\n  Hint: do not", "where": "model.py:3",
            "code": "thing()"}),
        Event("graph_captured", "capture", graph=graph),
        Event("guards_built", "capture", "guards of f, entry 0", source="x.size(0) == 4\nx.dtype == float32"),
        Event("guard_failed", "capture", "f: x: size of dim 0 changed from 4 to 8",
              data={"reason": "x: size of dim 0 changed from 4 to 8"}),
        Event("recompiled", "capture", "f: x: size of dim 0 changed from 4 to 8",
              data={"reason": "x: size of dim 0 changed from 4 to 8", "function": "f"}),
        Event("graph_break", "capture", "model.py:3: unsupported", data={  # the recompile reports it again
            "reason": "Unsupported thing\n  Explanation: it cannot be traced\n  Hint: do not", "where": "model.py:3",
            "code": "thing()"}),
        Event("fallback", "codegen-toy", f"graph {graph.name!r}: kernel k0 runs in the loop-IR interpreter",
              graph=graph, data={"reason": "kernel k0 runs in the loop-IR interpreter: toy", "cause": "kernel"}),
        Event("fallback", "capture", "g runs eagerly", data={
            "function": "g", "reason": "model.py:9: print() while tracing\n    print(1)", "cause": "eager",
            "break_reason": "print() while tracing", "where": "model.py:9", "code": "print(1)"}),
    ]


def test_report_is_read_from_events():
    graph = graph_of(f, torch.randn(4), name="f_0")
    out = ExplainOutput.from_events(events(graph), function="f", frontend="toy", calls=2)
    [captured] = out.graphs
    assert captured.name == "f_0" and captured.graph is graph and captured.codegen is None
    assert captured.ops == {"aten.mul.Tensor": 2, "aten.relu.default": 1, "aten.sin.default": 1,
                            "aten.add.Tensor": 1}
    assert out.ops_per_graph == [[n.op for n in graph.nodes]] and out.op_count == 5
    assert out.graph_breaks == [
        GraphBreak("Unsupported thing\n  Explanation: it cannot be traced\n  Hint: do not", "model.py:3", "thing()"),
        GraphBreak("print() while tracing", "model.py:9", "print(1)", eager=True),
    ]
    assert out.graph_breaks[0].summary == "Unsupported thing (it cannot be traced)"
    [entry] = out.guards
    assert entry.entry == "f, entry 0" and entry.guards == ("x.size(0) == 4", "x.dtype == float32")
    assert [r.reason for r in out.recompiles] == ["x: size of dim 0 changed from 4 to 8"]
    assert out.guard_failures == ["x: size of dim 0 changed from 4 to 8"]
    kernel, eager = out.fallbacks
    assert (kernel.subject, kernel.cause, kernel.warned) == ("graph 'f_0'", "kernel", False)
    assert (eager.subject, eager.cause, eager.warned, eager.where) == ("function g", "eager", True, "model.py:9")


def test_report_prints_a_summary():
    graph = graph_of(f, torch.randn(4), name="f_0")
    text = str(ExplainOutput.from_events(events(graph), function="f", frontend="toy", calls=2))
    assert text.startswith("ember.explain: f, frontend toy, 2 calls\n"
                           "1 graph, 2 graph breaks, 5 ops, 1 recompile, 2 fallbacks\n")
    assert "Graphs\n  1. f_0: 5 ops: aten.mul.Tensor x2, aten.relu.default x1" in text
    assert ("Graph breaks\n  1. model.py:3: Unsupported thing (it cannot be traced)\n       thing()\n"
            "  2. model.py:9: print() while tracing; the function runs eagerly\n       print(1)") in text
    assert "Guards\n  f, entry 0: 2 guards\n    x.size(0) == 4\n    x.dtype == float32" in text
    assert "Recompiles\n  1. x: size of dim 0 changed from 4 to 8" in text
    assert ("Fallbacks\n  1. [kernel] graph 'f_0' (codegen-toy): kernel k0 runs in the loop-IR interpreter: toy\n"
            "  2. [eager] function g (capture) at model.py:9: print() while tracing") in text


def test_explain_runs_the_compiled_function_and_reports_what_the_runtime_saw(toy, x):
    explained = explain(f, options={"frontend": "toy"})
    out = explained(x)
    torch.testing.assert_close(out.result, f(x))
    assert out.frontend == "toy" and out.calls == 1 and list(out.compiled) == ["f"]
    assert not out.graphs  # the toy frontend reports no capture events
    again = explained(x + 1)
    torch.testing.assert_close(again.result, f(x + 1))
    assert again.calls == 2 and len(again.events) >= len(out.events)
