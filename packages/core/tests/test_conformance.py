"""The codegen conformance kit, run on ember-core's own interpreter codegen (and shown to catch a wrong one)."""

import pytest
import torch
from ember_core import CompiledGraph
from ember_core._builtin import InterpreterCodegen
from ember_core.testing import CodegenConformance, battery_case


class TestInterpreterCodegen(CodegenConformance):
    codegen = InterpreterCodegen()


class OffByOne:
    """A broken codegen: adds 1 to every floating output."""

    def compile(self, graph, example_inputs, options):
        inner = InterpreterCodegen().compile(graph, example_inputs, options)
        return CompiledGraph(lambda xs: [y + 1 if y.is_floating_point() else y for y in inner(xs)], graph, "off-by-one")


class NotCompiled:
    def compile(self, graph, example_inputs, options):
        return lambda xs: xs


def test_kit_catches_wrong_outputs():
    kit = type("Kit", (CodegenConformance,), {"codegen": OffByOne()})()
    with pytest.raises(AssertionError, match=r"pointwise_chain \(input set 0, shapes \(6, 8\), \(6, 8\)\), output 0"):
        kit.test_outputs_match_interpreter("pointwise_chain")


def test_kit_requires_a_compiled_graph():
    kit = type("Kit", (CodegenConformance,), {"codegen": NotCompiled()})()
    with pytest.raises(AssertionError, match="NotCompiled.compile returned function, not ember_core.CompiledGraph"):
        kit.test_outputs_match_interpreter("softmax")


def test_kit_without_a_codegen_fails_clearly():
    with pytest.raises(pytest.fail.Exception, match="Kit.codegen is not set"):
        type("Kit", (CodegenConformance,), {})().test_outputs_match_interpreter("softmax")


def test_kit_skips_listed_cases():
    kit = type("Kit", (CodegenConformance,), {"codegen": OffByOne(), "skip_cases": {"softmax": "not yet"}})()
    with pytest.raises(pytest.skip.Exception, match="not yet"):
        kit.test_outputs_match_interpreter("softmax")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on machines without CUDA")
def test_kit_skips_cuda_without_a_gpu():
    kit = type("Kit", (CodegenConformance,), {"codegen": OffByOne(), "device": "cuda"})()
    with pytest.raises(pytest.skip.Exception, match="needs CUDA"):
        kit.test_outputs_match_interpreter("softmax")


def test_symbolic_cases_are_checked_at_a_second_size():
    sets = battery_case("softmax_symbolic").input_sets()
    assert [x[0].shape[0] for x in sets] == [6, 6, 11]
