"""`ember.explain`: graphs with their ops, graph breaks at the user's line, guards, recompiles and fallbacks, for
both frontends, read from ember's events; and the warning a fallback to eager gives, once per compiled function."""

from __future__ import annotations

import inspect
import warnings

import ember
import pytest
import torch
from torch.testing import assert_close


def line_of(fn, text: str) -> int:
    """The line number in this file of the first line of `fn` that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


def two_matmuls(x, w):
    return torch.relu(x @ w @ w) + 1


def with_a_break(x, w):
    y = (x @ w) @ w
    print("explain: a graph break")
    return torch.relu(y) + 1


def with_a_hook(x):
    y = x * 3
    y.register_hook(lambda g: g * 10)
    return y.sum()


def fallback_warnings(caught) -> list:
    return [w for w in caught if issubclass(w.category, ember.FallbackWarning)]


def test_graph_op_counts(frontend):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    out = ember.explain(two_matmuls, options={"frontend": frontend})(x, w)
    assert_close(out.result, two_matmuls(x, w))
    [graph] = out.graphs
    assert graph.ops == {"aten.mm.default": 2, "aten.relu.default": 1, "aten.add.Tensor": 1}
    assert graph.codegen == out.compiled[graph.name] and graph.codegen
    assert (out.graph_count, out.graph_break_count, out.op_count) == (1, 0, 4)
    assert out.ops_per_graph == [["aten.mm.default", "aten.mm.default", "aten.relu.default", "aten.add.Tensor"]]
    assert not out.graph_breaks and not out.recompiles and not out.fallbacks
    text = str(out)
    assert f"ember.explain: two_matmuls, frontend {frontend}, 1 call" in text
    assert "1 graph, 0 graph breaks, 4 ops, 0 recompiles, 0 fallbacks" in text
    assert f"{graph.name}, compiled by {graph.codegen}: 4 ops: aten.mm.default x2, " in text


def test_graph_break_names_the_reason_and_the_users_line(frontend):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with warnings.catch_warnings(record=True):  # the trace frontend warns: tested below
        warnings.simplefilter("always")
        out = ember.explain(with_a_break, options={"frontend": frontend})(x, w)
    assert_close(out.result, with_a_break(x, w))
    [found] = out.graph_breaks
    line = line_of(with_a_break, "print(")
    assert found.where == f"{__file__}:{line}" and found.code == 'print("explain: a graph break")'
    assert "print" in found.reason
    assert f"test_explain.py:{line}: " in str(out) and 'print("explain: a graph break")' in str(out)
    if frontend == "dynamo":  # split around the break: the matmuls, then relu and add
        assert [g.ops for g in out.graphs] == [{"aten.mm.default": 2}, {"aten.relu.default": 1, "aten.add.Tensor": 1}]
        assert not found.eager and not out.fallbacks
    else:  # one graph or none: the function runs eagerly, a fallback at the same line
        assert found.eager and not out.graphs
        [fallback] = out.fallbacks
        assert (fallback.cause, fallback.subject, fallback.where) == ("eager", "function with_a_break", found.where)


def test_guards_of_each_entry_are_listed(frontend):
    out = ember.explain(two_matmuls, options={"frontend": frontend})(torch.randn(4, 4), torch.randn(4, 4))
    [entry] = out.guards
    assert "two_matmuls" in entry.entry and entry.guards and out.out_guards == list(entry.guards)
    if frontend == "trace":
        assert {"x.size() == (4, 4)", "w.dtype is torch.float32", "is_grad_enabled() is True"} <= set(entry.guards)
    else:
        assert any("L['x']" in g for g in entry.guards)
    assert "\nGuards\n" in str(out) and entry.guards[0] in str(out)


def test_a_new_shape_reports_a_recompile_and_its_reason(frontend):
    explained = ember.explain(two_matmuls, options={"frontend": frontend})
    w = torch.randn(4, 4)
    first = explained(torch.randn(4, 4), w)
    assert not first.recompiles and first.calls == 1
    x = torch.randn(6, 4)
    out = explained(x, w)
    assert_close(out.result, two_matmuls(x, w))
    assert out.calls == 2 and len(out.graphs) == 2 and len(out.guards) == 2
    [recompile] = out.recompiles
    if frontend == "trace":
        assert recompile.reason == "x: size of dim 0 changed from 4 to 6"
    else:
        assert "tensor 'x' size mismatch at index 0. expected 4, actual 6" in recompile.reason
    assert out.guard_failures and recompile.reason in out.guard_failures[-1]
    assert f"\nRecompiles\n  1. {recompile.reason.splitlines()[0]}" in str(out)


def test_a_fallback_is_listed_and_warns_once(frontend):
    explained = ember.explain(with_a_hook, options={"frontend": frontend})
    x = torch.randn(4, requires_grad=True)
    with pytest.warns(ember.FallbackWarning, match="with_a_hook.* runs eagerly") as caught:
        explained(torch.randn(4, requires_grad=True))
        out = explained(x)
    [warned] = fallback_warnings(caught)  # two calls, one warning
    line = line_of(with_a_hook, "register_hook")
    assert (warned.filename, warned.lineno) == (__file__, line)
    out.result.backward()
    assert_close(x.grad, torch.full((4,), 30.0))  # the hook ran, as eagerly
    [fallback] = out.fallbacks
    assert fallback.cause == "eager" and fallback.warned and fallback.where == f"{__file__}:{line}"
    assert fallback.stage == "capture" and "hook" in fallback.reason
    assert f"Fallbacks\n  1. [eager] {fallback.subject} (capture) at {__file__}:{line}: " in str(out)


def test_explain_with_arguments_runs_at_once():
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    out = ember.explain(two_matmuls, x, w, options={"frontend": "trace"})
    assert isinstance(out, ember.ExplainOutput) and out.graph_count == 1
    assert_close(out.result, two_matmuls(x, w))


def test_a_fallback_of_the_trace_frontend_warns_without_explain():
    compiled = ember.compile(with_a_hook, options={"frontend": "trace"})
    with pytest.warns(ember.FallbackWarning) as caught:
        for _ in range(3):
            compiled(torch.randn(4, requires_grad=True))
    assert len(fallback_warnings(caught)) == 1
