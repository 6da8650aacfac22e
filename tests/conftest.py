"""Integration fixtures: every package installed; each test compares ember with eager. The session has a disk
cache of its own (builds are shared between tests, nothing is left in the user's cache), and each test starts
with the caches of stage results empty, so that every stage runs and reports its events."""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile

import ember_core
import ember_runtime
import pytest
import torch

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-integration-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)

FRONTENDS = ["dynamo", "trace"]


class RoundTripChecker:
    """Every graph any stage reports during the suite must survive JSON, its text and fx exactly, and verify.
    A graph is checked once per worker: stages report the same graph several times (captured, then compiled, then
    built; a cache miss), and tests compile the same graphs again (both frontends, each partitioner); checking each
    report made the suite's main run 983 s instead of 821 on 2 cores."""

    # digests of the graphs checked so far in this process: their JSON (constants' data inline) and their dataclass
    # repr, which keeps what a lossy encoding would merge (a tuple and a list, 1 and 1.0, a dtype and its name)
    checked: set[str] = set()

    @ember_core.hookimpl
    def ember_event(self, event):
        graph = event.graph
        if isinstance(graph, ember_core.Graph):
            data = json.dumps(ember_core.graph_to_json(graph), separators=(",", ":"))
            digest = hashlib.sha256(f"{data}\0{graph!r}".encode()).hexdigest()
            if digest in self.checked:
                return
            self.check(graph)
            self.checked.add(digest)

    @staticmethod
    def check(graph) -> None:
        ember_core.verify(graph)
        assert _same(ember_core.loads(ember_core.dumps(graph)), graph), f"JSON round trip of {graph.name}"
        big = {k: c.tensor for k, c in graph.constants.items()}  # the text leaves large constants' data out
        assert _same(ember_core.parse_graph(str(graph), constants=big), graph), f"text round trip of {graph.name}"
        if not _has_sym_args(graph):
            assert _same(ember_core.from_fx(ember_core.to_fx(graph)), graph), f"fx round trip of {graph.name}"


def _same(back, graph) -> bool:
    """Equal graphs; a NaN argument (`scalar_tensor(nan)` of kl_div's decomposition) is unequal to itself, so
    NaNs are compared as a marker."""
    return back == graph or _nan_marked(back) == _nan_marked(graph)


def _nan_marked(graph):
    def mark(x):
        if isinstance(x, float) and x != x:
            return "<nan>"
        if isinstance(x, (list, tuple)):
            return type(x)(mark(v) for v in x)
        return {k: mark(v) for k, v in x.items()} if isinstance(x, dict) else x
    nodes = tuple(dataclasses.replace(n, args=mark(n.args), kwargs=mark(n.kwargs)) for n in graph.nodes)
    return graph.replace(nodes=nodes)


def _has_sym_args(graph) -> bool:
    return any(isinstance(a, ember_core.Sym) for n in graph.nodes for a in (*n.args, *n.kwargs.values()))


@pytest.fixture(autouse=True)
def round_trips():
    pm = ember_core.get_plugin_manager().pm
    name = pm.register(RoundTripChecker(), name="round-trip-checker")
    yield
    if pm.get_plugin(name) is not None:
        pm.unregister(name=name)


@pytest.fixture(autouse=True)
def builds_succeed(no_build_failures):
    """Every test fails when a codegen's generated code did not build, even though the graph then runs correctly
    in the interpreter codegen: a build failure is a codegen bug (ember-core's `no_build_failures`)."""
    yield


@pytest.fixture(autouse=True)
def stages_run(cold_stage_caches):
    """No partition, kernel plan or compiled graph comes from an earlier test: the disk caches of stage results
    (ember-core's `cold_stage_caches`) and the runtime's compiled graphs in memory are emptied, so every stage runs
    and sends its events whichever tests this process ran before (a report test failed after another test had
    compiled the same block: its graphs came from memory and sent no `kernels_planned`)."""
    ember_runtime.clear_cache()
    yield


@pytest.fixture(autouse=True)
def fresh_state():
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


@pytest.fixture(params=FRONTENDS)
def frontend(request):
    return request.param


def skip_low_precision_on_the_triton_interpreter() -> None:
    """bf16/fp16 accuracy is never judged on Triton's interpreter: it truncates float32 → bf16 casts where CUDA
    rounds to nearest (2-3x the error), so it hides or invents precision bugs. Such a test runs on the C++ codegen
    here and on real kernels under `./dev gpu`."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if interpreted and '"triton"' in os.environ.get("EMBER_OPTIONS", ""):
        pytest.skip("low-precision accuracy is not judged on Triton's interpreter (it truncates where CUDA rounds)")


def grads_of(params):
    return [p.grad.detach().clone() if p.grad is not None else None for p in params]


def assert_same_value_and_grad(fn, compiled, x, *args, where: str = "") -> None:
    """`fn(x, *args)` through eager and through `compiled`, each on its own copy of `x` requiring grad: the outputs,
    and x's gradient of a random weighted sum of them, equal as assert_close judges (`where`: said on a mismatch)."""
    x_eager, x_ember = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager, out = fn(x_eager, *args), compiled(x_ember, *args)
    weights = torch.randn(out.shape)
    torch.testing.assert_close((out, *torch.autograd.grad((out * weights).sum(), x_ember)),
                               (eager, *torch.autograd.grad((eager * weights).sum(), x_eager)),
                               msg=(lambda m: f"{where}: {m}") if where else None)


def assert_same_training_step(model, compiled, inputs, loss_fn=lambda out: out.float().pow(2).mean(), **tol):
    """Forward and backward once through eager and once through ember on copies of the same inputs (`tol`:
    assert_close's rtol and atol)."""
    eager_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    ember_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    params = list(model.parameters())
    model.zero_grad(set_to_none=True)
    eager_out = model(*eager_in)
    loss_fn(eager_out).backward()
    eager_grads = grads_of(params)
    model.zero_grad(set_to_none=True)
    ember_out = compiled(*ember_in)
    loss_fn(ember_out).backward()
    torch.testing.assert_close(ember_out, eager_out, **tol)
    for p, e, c in zip(params, eager_grads, grads_of(params)):
        torch.testing.assert_close(c, e, msg=lambda m, p=p: f"grad of param {tuple(p.shape)}: {m}", **tol)
    for e, c in zip(eager_in, ember_in):
        if e.requires_grad:
            torch.testing.assert_close(c.grad, e.grad, **tol)
