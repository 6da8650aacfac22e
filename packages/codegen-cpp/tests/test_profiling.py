"""The profiled twin of the C++ wrapper: each kernel runs alone, through its own entry point, in a profiler range
named after it; results are the normal path's, which opens no range."""

from __future__ import annotations

import torch
from ember_codegen_cpp import CppCodegen, _program
from ember_lowering.codegen import _wrapper
from helpers import compile_fn


def softmax_then_matmul(x, w):
    return ((torch.softmax(x, -1) * 2) @ w + 1,)


def test_profiled_calls_run_each_kernel_in_a_range_named_after_it():
    x, w = torch.randn(6, 10), torch.randn(10, 3)
    compiled = compile_fn(softmax_then_matmul, x, w)
    with torch.profiler.profile() as prof:
        got = compiled([x, w])
    keys = {e.key for e in prof.key_averages()}
    kernels = [line.split("(")[0].split()[-1] for line in compiled.source.splitlines()
               if line.startswith("static int k")]
    assert len(kernels) == 2 and set(kernels) <= keys
    assert any(k.startswith("e") and k.endswith("aten.mm.default") for k in keys)
    assert any(k.startswith("ember:") for k in keys)
    torch.testing.assert_close(got[0], softmax_then_matmul(x, w)[0])


def test_every_kernel_has_an_entry_point_of_its_own():
    compiled = compile_fn(softmax_then_matmul, torch.randn(6, 10), torch.randn(10, 3))
    for line in compiled.source.splitlines():
        if line.startswith("static int k"):
            name = line.split("(")[0].split()[-1]
            assert f"int {_program.entry_point(name)}(" in compiled.source


def test_calls_without_a_profiler_open_no_range(monkeypatch):
    opened = []
    monkeypatch.setattr(_wrapper, "profile_range", lambda name: opened.append(name) or torch.no_grad())
    x, w = torch.randn(6, 10), torch.randn(10, 3)
    compiled = CppCodegen().compile(compile_fn(softmax_then_matmul, x, w).graph)
    compiled([x, w])
    assert opened == []
    with torch.profiler.profile():
        compiled([x, w])
    assert len(opened) == 4  # the graph, two kernels, the matmul


def test_tuned_kernels_are_profiled_as_the_variant_picked():
    x = torch.randn(64, 256)
    graph = compile_fn(lambda x: (torch.softmax(x, -1) * 2,), x).graph
    compiled = CppCodegen().compile(graph, [x], {"mode": "max-autotune"})
    with torch.profiler.profile() as prof:
        got = compiled([x])  # the first call measures the variants, then runs the kernels one by one
    assert any(e.key.startswith("k0_") for e in prof.key_averages())
    torch.testing.assert_close(got[0], torch.softmax(x, -1) * 2)
