"""CppCodegen: the conformance battery (every case as C++, no fallback of any cause), events, and the fallbacks
that keep every graph running."""

from __future__ import annotations

import logging

import pytest
import torch
from ember_codegen_cpp import Builder, CppCodegen
from ember_core import CompiledGraph
from ember_core.testing import CodegenConformance, battery_case
from helpers import CODEGEN, Events, check, trace


class TestCppConformance(CodegenConformance):
    codegen = CODEGEN
    fallbacks_allowed = ()  # every battery and training graph runs as C++


def test_compile_emits_kernels_generated_with_cpp_and_wrapper_source():
    graph = trace(lambda x: (x.exp() + 1,), torch.randn(5, 3))
    with Events() as ev:
        compiled = CODEGEN.compile(graph, None, {})
    generated = [e for e in ev.events if e.kind == "kernels_generated" and e.stage == "codegen-cpp"]
    assert len(generated) == 1
    assert 'extern "C"' in generated[0].source and "def graph_graph(inputs):" in generated[0].source
    assert compiled.source == generated[0].source and compiled.codegen == "cpp"


def test_compile_many_builds_in_parallel_and_returns_loaded_graphs():
    fns = [lambda x, k=k: (x * (k + 2) + k,) for k in range(3)]
    graphs = [trace(f, torch.randn(4, 4)) for f in fns]
    compiled = CppCodegen().compile_many(graphs)
    x = torch.randn(4, 4)
    for k, c in enumerate(compiled):
        torch.testing.assert_close(c([x])[0], x * (k + 2) + k)


def test_graph_the_printer_cannot_handle_runs_in_the_interpreter(monkeypatch, caplog):
    from ember_codegen_cpp import CannotPrint
    from ember_codegen_cpp import _codegen as _program

    class Refuses(_program.KernelPrinter):
        def print(self):
            raise CannotPrint("no rule for this test")

    monkeypatch.setattr(_program, "KernelPrinter", Refuses)
    x = torch.randn(3, 4)
    with Events() as ev, caplog.at_level(logging.INFO, logger="ember.kernels"):
        compiled = check(lambda x: (x.sin() * 2, x.sum(1)), x, fallback=True)
    assert "fallback" in ev.kinds_of("codegen-cpp")
    assert "no rule for this test" in caplog.text
    assert isinstance(compiled, CompiledGraph)


@pytest.mark.allow_build_failure("a compiler flag that does not exist")
def test_failed_build_falls_back_with_the_compilers_error(caplog):
    broken = CppCodegen(Builder(flags=("-O1", "-fno-such-flag-for-ember", "-shared", "-fPIC")))
    graph = battery_case("pointwise_chain").graph
    inputs = battery_case("pointwise_chain").inputs
    with Events() as ev, caplog.at_level(logging.WARNING, logger="ember.kernels"):
        compiled = broken.compile(graph, inputs, {})
        got = compiled(inputs)
        again = compiled(inputs)
    want = battery_case("pointwise_chain").reference(*inputs)
    for g, a, w in zip(got, again, want):
        torch.testing.assert_close(g, w)
        torch.testing.assert_close(a, w)
    fallbacks = [e for e in ev.events if e.kind == "fallback" and e.stage == "codegen-cpp"]
    assert len(fallbacks) == 1 and "fno-such-flag-for-ember" in fallbacks[0].message
    assert fallbacks[0].data["cause"] == "build"
    assert "fno-such-flag-for-ember" in caplog.text


@pytest.mark.allow_build_failure("no compiler")
def test_missing_compiler_falls_back(monkeypatch):
    codegen = CppCodegen(Builder(cxx="/nonexistent/g++"))
    x = torch.randn(4)
    compiled = codegen.compile(trace(lambda x: (x + 1,), x), None, {})
    with Events() as ev:
        torch.testing.assert_close(compiled([x])[0], x + 1)
    assert ev.kinds_of("codegen-cpp") == ["fallback"]


def test_integer_division_by_zero_raises_as_torch_does():
    a, b = torch.tensor([4, 5, 6]), torch.tensor([2, 0, 3])
    compiled = check(lambda a, b: (a // torch.tensor(1) + a,), a, b)  # divisor nonzero: the fast path
    compiled = CODEGEN.compile(trace(lambda a, b: (a // b,), a, b), None, {})
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled([a, b])
    torch.testing.assert_close(compiled([a, torch.tensor([2, 1, 3])])[0], a // torch.tensor([2, 1, 3]))


def test_index_out_of_bounds_raises_as_torch_does():
    w, i = torch.randn(5, 3), torch.tensor([0, 4, 7])
    compiled = CODEGEN.compile(trace(lambda w, i: (torch.nn.functional.embedding(i, w),), w, torch.tensor([0, 1])),
                               None, {})
    with pytest.raises(IndexError):
        compiled([w, i])
