"""The frontend conformance kit: subclass `FrontendConformance` in a plugin's tests.

    from ember_core.testing import FrontendConformance

    class TestMyFrontend(FrontendConformance):
        frontend = MyFrontend()
        backend = True           # it also serves as a Dynamo backend (ember_core.BackendFrontend): checked too
        splits_graphs = True     # it compiles the code on both sides of a graph break (else: may run it eagerly)

Each function of the battery (as eager code writes it, input mutation included) goes through
`frontend.wrap(fn, compile_graph, options)`, where the kit's `compile_graph` verifies every graph it is handed and
compiles it with ember-core's interpreter codegen. The kit checks results against eager (outputs and the inputs a
function writes), that compiled graphs are what runs, that the same shapes compile nothing new, that new shapes
compile again when `dynamic=False`, that a graph break runs correctly and is refused under `fullgraph=True`, that a
custom autograd function keeps its own backward (one that is not its forward's derivative: `Gate`), and that the
frontend implements the `Frontend` protocol. `options` holds torch.compile's arguments (`fullgraph`,
`dynamic`, `mode`, as the runtime passes them) and the kit's `options`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import torch

from .._builtin import interpreter_codegen
from ..graph._schema import Graph
from ..graph._verify import verify
from ..plugins._stages import BackendFrontend, Frontend
from ._battery import OTHER_SIZE, TRACE_SIZE, battery_names, battery_spec, clone_inputs
from ._custom_function import gate_reference

# ---------------------------------------------------------------------------------------------- functions


def _pointwise(x):
    return (x.sin() * 2 + 1).relu().sum(1)


def _branchy(x):
    y = x * 2
    if y.sum() > 0:  # a branch on a tensor's value: a graph break
        return y.cos() + x
    return y.sin() - x


def _function(name: str) -> Callable:
    spec = battery_spec(name)
    return spec.reference or spec.fn


def _inputs(name: str, n: int, seed: int) -> list:
    return battery_spec(name).make_inputs(n, torch.Generator().manual_seed(seed))


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def frontend_case_names() -> tuple[str, ...]:
    """The battery's distinct functions (a symbolic case repeats its static twin's function)."""
    seen: set[int] = set()
    names = []
    for name in battery_names():
        fn = _function(name)
        if id(fn) not in seen:
            seen.add(id(fn))
            names.append(name)
    return tuple(names)


class GraphRecorder:
    """The `compile_graph` the kit hands a frontend: verifies each graph, compiles it with the interpreter codegen,
    and counts the graphs compiled and the calls of their compiled forms."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []
        self.runs = 0

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[[Sequence[Any]], list]:
        assert isinstance(graph, Graph), f"compile_graph got a {type(graph).__name__}, not an ember_core.Graph"
        verify(graph)
        self.graphs.append(graph)
        compiled = interpreter_codegen().compile(graph, example_inputs, {})

        def run(inputs: Sequence[Any]) -> list:
            self.runs += 1
            return compiled(inputs)

        return run


class FrontendConformance:
    """Base test class (pytest collects its subclasses). Set `frontend`; optionally `backend` (True: check
    `BackendFrontend` too), `splits_graphs` (True: check that code around a graph break is compiled, not run
    eagerly), `options`, `rtol`/`atol` and `skip_cases` (case name → reason). Override `reset()` when the
    frontend keeps state between tests beyond Dynamo's."""

    frontend: Any = None
    backend: bool = False
    splits_graphs: bool = False  # True: the frontend compiles the code on both sides of a graph break
    options: Mapping[str, Any] = {}
    rtol: float | None = None
    atol: float | None = None
    skip_cases: Mapping[str, str] = {}

    def reset(self) -> None:
        torch._dynamo.reset()

    def _wrap(self, fn: Callable, **overrides: Any) -> tuple[Callable, GraphRecorder]:
        if self.frontend is None:
            pytest.fail(f"{type(self).__name__}.frontend is not set: give it the frontend object to test")
        self.reset()
        recorder = GraphRecorder()
        options = {"fullgraph": False, "dynamic": None, "mode": None, **self.options, **overrides}
        return self.frontend.wrap(fn, recorder, options), recorder

    def _check_call(self, where: str, fn: Callable, compiled: Callable, inputs: Sequence[Any]) -> None:
        """One call of `compiled` and of eager `fn` on copies of `inputs`: same outputs, same inputs afterwards."""
        eager_in, compiled_in = clone_inputs(inputs), clone_inputs(inputs)
        want, got = fn(*eager_in), compiled(*compiled_in)
        self._compare(f"{where}, outputs", _as_list(got), _as_list(want))
        self._compare(f"{where}, inputs after the call", compiled_in, eager_in)

    def _compare(self, where: str, got: Sequence[Any], want: Sequence[Any]) -> None:
        assert len(got) == len(want), f"{where}: {len(got)} values, eager gives {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            if not isinstance(w, torch.Tensor):
                assert g == w, f"{where} {k}: {g!r} != {w!r}"
                continue
            torch.testing.assert_close(g, w, rtol=self.rtol, atol=self.atol, equal_nan=True,
                                       msg=lambda m, k=k: f"{where} {k}: {m}")

    # ------------------------------------------------------------------------------------------ tests

    def test_implements_the_frontend_protocol(self) -> None:
        if self.frontend is None:
            pytest.fail(f"{type(self).__name__}.frontend is not set: give it the frontend object to test")
        name = type(self.frontend).__name__
        assert isinstance(self.frontend, Frontend), f"{name} has no wrap(fn, compile_graph, options): see Frontend"
        if self.backend:
            assert isinstance(self.frontend, BackendFrontend), (
                f"{name} has no backend(compile_graph, options): see ember_core.BackendFrontend")

    @pytest.mark.parametrize("case_name", frontend_case_names())
    def test_results_match_eager(self, case_name: str) -> None:
        if case_name in self.skip_cases:
            pytest.skip(self.skip_cases[case_name])
        fn = _function(case_name)
        compiled, recorder = self._wrap(fn)
        for seed in (0, 1):
            self._check_call(f"{case_name} (seed {seed})", fn, compiled, _inputs(case_name, TRACE_SIZE, seed))
        assert recorder.graphs, f"{case_name}: the frontend never called compile_graph"
        assert recorder.runs >= 2, f"{case_name}: compiled graphs ran {recorder.runs} times in 2 calls"

    def test_the_same_shapes_compile_nothing_new(self) -> None:
        compiled, recorder = self._wrap(_pointwise)
        self._check_call("first call", _pointwise, compiled, [torch.randn(TRACE_SIZE, 8)])
        graphs = len(recorder.graphs)
        self._check_call("second call", _pointwise, compiled, [torch.randn(TRACE_SIZE, 8)])
        assert len(recorder.graphs) == graphs, "a call with the same shapes compiled another graph"

    def test_new_shapes_compile_again_when_not_dynamic(self) -> None:
        compiled, recorder = self._wrap(_pointwise, dynamic=False)
        self._check_call(f"size {TRACE_SIZE}", _pointwise, compiled, [torch.randn(TRACE_SIZE, 8)])
        graphs = len(recorder.graphs)
        self._check_call(f"size {OTHER_SIZE}", _pointwise, compiled, [torch.randn(OTHER_SIZE, 8)])
        assert len(recorder.graphs) > graphs, "with dynamic=False, a new input shape compiled no new graph"
        again = len(recorder.graphs)
        self._check_call(f"size {TRACE_SIZE} again", _pointwise, compiled, [torch.randn(TRACE_SIZE, 8)])
        assert len(recorder.graphs) == again, "returning to a shape seen before compiled it again"

    def test_new_shapes_match_eager(self) -> None:
        compiled, recorder = self._wrap(_pointwise)
        for n in (TRACE_SIZE, OTHER_SIZE, OTHER_SIZE + 2):
            self._check_call(f"size {n}", _pointwise, compiled, [torch.randn(n, 8)])
        assert recorder.runs >= 3, f"compiled graphs ran {recorder.runs} times in 3 calls"

    def test_a_graph_break_runs_like_eager(self) -> None:
        compiled, recorder = self._wrap(_branchy)
        for sign in (1.0, -1.0):
            self._check_call(f"branch {sign:+}", _branchy, compiled, [torch.rand(TRACE_SIZE, 8) * sign])
        if self.splits_graphs:
            assert len(recorder.graphs) >= 2, (
                f"{len(recorder.graphs)} graphs compiled around a graph break: expected the code before it and each "
                "branch after it")

    def test_fullgraph_refuses_a_graph_break(self) -> None:
        compiled, _ = self._wrap(_branchy, fullgraph=True)
        with pytest.raises(Exception):  # noqa: B017, PT011 - each frontend raises its own error type
            compiled(torch.rand(TRACE_SIZE, 8))

    def test_custom_autograd_function_keeps_its_backward(self) -> None:
        """Gradients through `Gate` equal eager's: the frontend kept its backward (as an `ember.custom_function`
        call, or by running the function eagerly), never re-derived its forward nor dropped it."""
        compiled, _ = self._wrap(gate_reference)
        g = torch.Generator().manual_seed(0)
        inputs = [torch.randn(TRACE_SIZE, 8, generator=g), torch.randn(8, generator=g)]
        eager_in, compiled_in = ([x.clone().requires_grad_() for x in inputs] for _ in range(2))
        want, got = gate_reference(*eager_in), compiled(*compiled_in)
        self._compare("outputs", _as_list(got), _as_list(want))
        assert [o.requires_grad for o in got] == [o.requires_grad for o in want], "outputs' requires_grad"
        want[0].pow(2).sum().backward()
        got[0].pow(2).sum().backward()
        self._compare("gradients", [x.grad for x in compiled_in], [x.grad for x in eager_in])

    def test_backend_compiles_what_dynamo_captures(self) -> None:
        if not self.backend:
            pytest.skip("not a BackendFrontend (set backend = True to check it)")
        self.reset()
        recorder = GraphRecorder()
        options = {"fullgraph": False, "dynamic": None, "mode": None, **self.options}
        compiled = torch.compile(_pointwise, backend=self.frontend.backend(recorder, options))
        self._check_call("torch.compile", _pointwise, compiled, [torch.randn(TRACE_SIZE, 8)])
        assert recorder.graphs and recorder.runs, "the backend compiled or ran no graph"
