"""The codegen conformance kit, run on ember-core's own interpreter codegen (and shown to catch a wrong one)."""

import pytest
import torch
from ember_core import CompiledGraph, Event, emit
from ember_core._builtin import InterpreterCodegen
from ember_core.testing import CodegenConformance, battery_case, training_case, training_names


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


class ReportsAFallback:
    """Runs every graph in the interpreter codegen after reporting a fallback of `cause`, as a codegen whose
    generated code did not build (`build`) or that left a kernel to an interpreter (`kernel`) would."""

    def __init__(self, cause):
        self.cause = cause

    def compile(self, graph, example_inputs, options):
        emit(Event("fallback", "codegen-test", f"graph {graph.name!r}: the build failed",
                   data={"reason": "the build failed", "cause": self.cause}))
        return InterpreterCodegen().compile(graph, example_inputs, options)


def test_kit_fails_a_build_failure_even_though_the_outputs_are_right():
    kit = type("Kit", (CodegenConformance,), {"codegen": ReportsAFallback("build")})()
    with pytest.raises(AssertionError, match=r"softmax: a build failed .*fallbacks by cause: build 1"):
        kit.test_outputs_match_interpreter("softmax")
    with pytest.raises(AssertionError, match=r"training:attention: a build failed .*build 2"):
        kit.test_training_graphs_match_interpreter("attention")


def test_kit_counts_other_fallbacks_and_fails_those_not_allowed():
    lenient = type("Kit", (CodegenConformance,), {"codegen": ReportsAFallback("kernel")})()
    lenient.test_outputs_match_interpreter("softmax")  # by default any cause but `build` is allowed
    strict = type("Kit", (CodegenConformance,), {"codegen": ReportsAFallback("kernel"), "fallbacks_allowed": ()})()
    with pytest.raises(AssertionError, match=r"causes not allowed here \(allowed: none\); fallbacks by cause: "
                                             r"kernel 1\n\[kernel\] codegen-test"):
        strict.test_outputs_match_interpreter("softmax")


def test_kit_never_allows_build_failures():
    kit = type("Kit", (CodegenConformance,), {"codegen": InterpreterCodegen(), "fallbacks_allowed": ("build",)})()
    with pytest.raises(pytest.fail.Exception, match="a build failure is never allowed"):
        kit.test_outputs_match_interpreter("softmax")


def test_training_cases_have_a_forward_and_a_backward_graph():
    case = training_case("attention")
    assert [i.kind for i in case.partition.backward.inputs].count("tangent") == 1
    assert any(o.kind == "grad" for o in case.partition.backward.outputs)
    assert any(n.op == "aten.div.Tensor" for n in case.partition.forward.nodes)  # scores / sqrt(d), decomposed
    assert set(training_names()) >= {"attention", "causal_attention", "norms", "losses", "softmax", "multi_output"}
