"""The codegen conformance kit: subclass `CodegenConformance` in a plugin's tests to check a codegen on the battery.

    from ember_core.testing import CodegenConformance

    class TestMyCodegen(CodegenConformance):
        codegen = MyCodegen()
        device = "cpu"          # or "cuda": moves every battery graph and its inputs there

Every battery graph is compiled once and run on several input sets (a second seed; a second size for symbolic
graphs); each output is compared with the reference interpreter's with `torch.testing.assert_close`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch

from .._fingerprint import fingerprint
from .._interpreter import Interpreter
from .._schema import Graph
from .._stages import CompiledGraph
from ._battery import BatteryCase, battery_case, battery_names, clone_inputs
from ._devices import graph_to_device, inputs_to_device


class CodegenConformance:
    """Base test class (pytest collects its subclasses). Set `codegen`; optionally `device`, `options`, and
    `rtol`/`atol` (None: assert_close's defaults for the dtype). `skip_cases` maps case names to a reason."""

    codegen: Any = None
    device: str = "cpu"
    options: Mapping[str, Any] = {}
    rtol: float | None = None
    atol: float | None = None
    skip_cases: Mapping[str, str] = {}

    # ------------------------------------------------------------------------------------------ helpers

    def _case(self, name: str) -> tuple[BatteryCase, Graph]:
        if self.codegen is None:
            pytest.fail(f"{type(self).__name__}.codegen is not set: give it the codegen object to test")
        if name in self.skip_cases:
            pytest.skip(self.skip_cases[name])
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            pytest.skip(f"device {self.device!r} needs CUDA")
        case = battery_case(name)
        return case, graph_to_device(case.graph, self.device)

    def _inputs(self, inputs: Sequence[Any]) -> list:
        return inputs_to_device(inputs, self.device)

    def _compile(self, graph: Graph, inputs: Sequence[Any]) -> CompiledGraph:
        compiled = self.codegen.compile(graph, inputs, dict(self.options))
        assert isinstance(compiled, CompiledGraph), (
            f"{type(self.codegen).__name__}.compile returned {type(compiled).__name__}, not ember_core.CompiledGraph"
        )
        return compiled

    def _compare(self, name: str, got: Sequence[Any], want: Sequence[Any], what: str) -> None:
        assert len(got) == len(want), f"{name} ({what}): {len(got)} outputs, the interpreter gives {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            self._compare_one(f"{name} ({what}), output {k}", g, w)

    def _compare_one(self, where: str, got: Any, want: Any) -> None:
        if not isinstance(want, torch.Tensor):
            assert got == want, f"{where}: {got!r} != {want!r}"
            return
        assert isinstance(got, torch.Tensor), f"{where}: expected a tensor, got {type(got).__name__}"
        assert got.device.type == want.device.type, f"{where}: on {got.device}, expected {want.device}"
        torch.testing.assert_close(got, want, rtol=self.rtol, atol=self.atol, equal_nan=True,
                                   msg=lambda m: f"{where}: {m}")

    # ------------------------------------------------------------------------------------------ tests

    @pytest.mark.parametrize("case_name", battery_names())
    def test_outputs_match_interpreter(self, case_name: str) -> None:
        case, graph = self._case(case_name)
        compiled = self._compile(graph, self._inputs(case.inputs))
        oracle = Interpreter(graph)
        for k, inputs in enumerate(case.input_sets()):
            inputs = self._inputs(inputs)
            want = oracle.run(clone_inputs(inputs))
            got = compiled(clone_inputs(inputs))
            self._compare(case_name, list(got), want, f"input set {k}, shapes {_shapes(inputs)}")

    @pytest.mark.parametrize("case_name", battery_names())
    def test_compile_leaves_graph_unchanged(self, case_name: str) -> None:
        case, graph = self._case(case_name)
        before = fingerprint(graph), str(graph)
        compiled = self._compile(graph, self._inputs(case.inputs))
        assert (fingerprint(graph), str(graph)) == before, f"{case_name}: compile changed the graph it was given"
        assert compiled.graph == graph, f"{case_name}: CompiledGraph.graph is not the graph that was compiled"
        assert compiled.codegen, f"{case_name}: CompiledGraph.codegen should name the codegen"


def _shapes(inputs: Sequence[Any]) -> str:
    return ", ".join(str(tuple(x.shape)) if isinstance(x, torch.Tensor) else repr(x) for x in inputs)
