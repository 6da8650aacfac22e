"""Helpers of ember-lowering's tests: trace a function to an ATen graph as ember's frontends do, lower it with
every check on (verifier and text round trip after each pass), and compare the plan's results, unfused and
scheduled, with ember-core's Interpreter on the same graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember_core import Graph, Interpreter, to_dtype
from ember_core.testing import trace_aten
from ember_lowering import Decision, KernelPlan, Op, SplitPolicy, lower, run_plan


def trace(fn: Callable, *args: Any, mode: str = "fake", name: str = "graph") -> Graph:
    """The functional ATen graph of fn (outputs flattened into a tuple), as capture sends it to lowering (the ops
    ember-core keeps whole included)."""
    return trace_aten(fn, *args, mode=mode, name=name)


def plan_of(fn: Callable, *args: Any, mode: str = "fake", passes=None) -> KernelPlan:
    return lower(trace(fn, *args, mode=mode), passes=passes, check=True, emit_event=False)


# Fused kernels compute in another order than eager (and float16/bfloat16 in float32 throughout).
TOLERANCE = {torch.float16: dict(atol=2e-2, rtol=2e-2), torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
             torch.float32: dict(atol=1e-4, rtol=1e-4)}


def assert_same(expected: Sequence[Any], got: Sequence[Any]) -> None:
    assert len(expected) == len(got)
    for k, (e, o) in enumerate(zip(expected, got)):
        if not isinstance(e, torch.Tensor):
            assert o == e, f"output {k}: {o} != {e}"
            continue
        assert o.shape == e.shape and o.dtype == e.dtype, \
            f"output {k}: {o.dtype}{list(o.shape)} vs {e.dtype}{list(e.shape)}"
        tol = TOLERANCE.get(e.dtype, {})
        torch.testing.assert_close(o, e, equal_nan=True, msg=lambda m, k=k: f"output {k}: {m}", **tol)


def check(fn: Callable, *args: Any, mode: str = "fake", others: Sequence[Sequence[Any]] = (),
          passes=None, split: SplitPolicy | None = None) -> KernelPlan:
    """Lower fn's graph unfused and scheduled (long reductions split under `split`); both must match the
    Interpreter on args and each of `others`."""
    graph = trace(fn, *args, mode=mode)
    constants = {n: c.tensor for n, c in graph.constants.items()}
    plans = [lower(graph, passes=(), check=True, emit_event=False, split=split),
             lower(graph, passes=passes, check=True, emit_event=False, split=split)]
    for inputs in (args, *others):
        expected = Interpreter(graph).run([clone(x) for x in inputs])
        for plan in plans:
            assert_same(expected, run_plan(plan, [clone(x) for x in inputs], constants))
    return plans[1]


def clone(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def verdicts(decisions: Sequence[Decision]) -> set[tuple[str, str]]:
    """(verdict, reason) of each decision."""
    return {(d.verdict, d.reason) for d in decisions}


def count_ops(plan: KernelPlan, op: Op) -> int:
    return sum(1 for k in plan.kernels for i in k.instrs() if i.op is op)


def before_after(fn: Callable, *args: Any, passes: Sequence, mode: str = "fake") -> tuple[KernelPlan, KernelPlan, list]:
    """The unfused plan, the plan after `passes` (checked after each), and the decisions; both plans give the
    same results on args."""
    from ember_lowering import lower_graph, schedule

    graph = trace(fn, *args, mode=mode)
    before = lower_graph(graph)
    decisions: list[Decision] = []
    after = schedule(before, passes=passes, check=True, decisions=decisions)
    constants = {n: c.tensor for n, c in graph.constants.items()}
    assert_same(run_plan(before, [clone(x) for x in args], constants), run_plan(after, [clone(x) for x in args],
                                                                                constants))
    return before, after, decisions


def random_inputs(plan: KernelPlan, seed: int = 0) -> list[torch.Tensor]:
    """Inputs of a plan with static input shapes: normal floats, small non-negative integers."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for name in plan.inputs:
        b = plan.buffer(name)
        shape, dtype = [int(d) for d in b.shape], to_dtype(b.dtype)
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(dtype))
        else:
            out.append(torch.randint(0, 4, shape, generator=gen).to(dtype))
    return out


def run_passes(text: str, passes: Sequence) -> tuple[KernelPlan, list[Decision]]:
    """Parse a plan from text, run `passes` over it (checked after each) and return the result and the
    decisions; the plan gives the same results before and after, on random inputs."""
    from ember_lowering import parse_plan, schedule

    before = parse_plan(text)
    decisions: list[Decision] = []
    after = schedule(before, passes=passes, check=True, decisions=decisions)
    inputs = random_inputs(before)
    assert_same(run_plan(before, [clone(x) for x in inputs]), run_plan(after, [clone(x) for x in inputs]))
    return after, decisions
