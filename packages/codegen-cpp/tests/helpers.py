"""Shared by the tests: trace a function to an ATen graph as ember's frontends do, compile it with the cpp
codegen, and compare with eager PyTorch and with ember-core's interpreter."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from ember_codegen_cpp import CppCodegen
from ember_core import CompiledGraph, Graph, Interpreter, record_events
from ember_core.testing import RegionPartitioner, trace_aten, trace_joint, with_grad

CODEGEN = CppCodegen()


def trace(fn: Callable, *args: Any, mode: str = "fake", name: str = "graph") -> Graph:
    """The functional ATen graph of fn (outputs flattened into a tuple), decomposed like ember's capture."""
    return trace_aten(fn, *args, mode=mode, name=name)


def compile_fn(fn: Callable, *args: Any, mode: str = "fake", codegen: CppCodegen = CODEGEN) -> CompiledGraph:
    return codegen.compile(trace(fn, *args, mode=mode), list(args), {})


def clone(xs: Sequence[Any]) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def check(fn: Callable, *args: Any, mode: str = "fake", others: Sequence[Sequence[Any]] = (),
          fallback: bool = False, **tol) -> CompiledGraph:
    """Compile fn once; on args and each of `others` its outputs equal eager's (and the interpreter's). Unless
    `fallback`, every kernel must have run as C++ (no fallback event)."""
    with Events() as ev:
        compiled = compile_fn(fn, *args, mode=mode)
        compiled(clone(args))
    assert fallback or not ev.kinds("fallback"), [e.message for e in ev.kinds("fallback")]
    for inputs in (args, *others):
        want = pytree.tree_leaves(fn(*clone(inputs)))
        got = compiled(clone(inputs))
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            if isinstance(w, torch.Tensor):
                assert g.dtype == w.dtype and g.shape == w.shape, f"output {k}: {g.dtype}{list(g.shape)} vs " \
                                                                  f"{w.dtype}{list(w.shape)}"
                torch.testing.assert_close(g, w, equal_nan=True, msg=lambda m, k=k: f"output {k}: {m}", **tol)
            else:
                assert g == w
        oracle = Interpreter(compiled.graph).run(clone(inputs))
        for g, w in zip(got, oracle):
            if isinstance(w, torch.Tensor):
                torch.testing.assert_close(g, w, equal_nan=True, **tol)
    return compiled


Events = record_events  # `ev.kinds_of("codegen-cpp")`: the kinds the C++ codegen emitted



def check_training(fn: Callable, *primals: Any, **tol) -> list[CompiledGraph]:
    """Compile fn's joint graph and its forward and backward graphs (ember-core's reference joint tracer and
    partitioner: floating primals get gradients, tangents random); each must run as C++ (no fallback) and match
    the interpreter, and the compiled forward then backward must give eager's outputs and gradients."""
    case = trace_joint(fn, with_grad(primals), decompose=True, mode="real", name=_name(fn))
    part = RegionPartitioner().partition(case.joint)
    graphs = [case.joint.graph, part.forward, part.backward]
    with Events() as ev:
        compiled = CODEGEN.compile_many(graphs)
        forward = compiled[1](clone(case.primals))
        n = case.joint.num_forward_outputs
        got = [*forward[:n], *compiled[2]([*forward[n:], *clone(case.tangents)])]
        joint = compiled[0](clone(case.inputs))
    assert not ev.kinds("fallback"), [e.message for e in ev.kinds("fallback")]
    want = Interpreter(case.joint.graph).run(clone(case.inputs))
    eager = _eager_outputs_and_grads(fn, case)
    assert len(got) == len(want) == len(joint) == len(eager)
    for k, (g, j, w, e) in enumerate(zip(got, joint, want, eager)):
        for what, value in (("forward then backward", g), ("joint", j)):
            torch.testing.assert_close(value, w, equal_nan=True, msg=lambda m, k=k, what=what: f"{what}, output "
                                                                                             f"{k}: {m}", **tol)
        torch.testing.assert_close(w, e, equal_nan=True, msg=lambda m, k=k: f"interpreter vs eager, output {k}: {m}",
                                   **tol)
    return compiled


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", "fn").replace("<lambda>", "fn")


def _eager_outputs_and_grads(fn: Callable, case: Any) -> list:
    """What the joint graph computes, by eager PyTorch: the outputs, then the primals' gradients."""
    primals = with_grad(case.primals)
    outs = pytree.tree_leaves(fn(*primals))
    diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [p for p in primals if isinstance(p, torch.Tensor) and p.requires_grad]
    grads = torch.autograd.grad(diff, wrt, case.tangents, allow_unused=True)
    return [o.detach() for o in outs] + [g for g in grads if g is not None]
