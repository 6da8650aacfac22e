"""build_program: kernels between externs share one C++ segment; the unit has one extern "C" per segment, and one
entry point per kernel for profiling."""

from __future__ import annotations

import torch
from ember_codegen_cpp import build_program, prelude
from ember_lowering import Extern, lower
from ember_lowering.codegen import InterpretedKernel, Segment
from helpers import trace


def test_kernels_between_externs_form_segments():
    w = torch.randn(8, 8)
    plan = lower(trace(lambda x, w: ((x.relu() @ w).sum(0), x.exp()), torch.randn(4, 8), w), emit_event=False)
    program = build_program(plan)
    kinds = [type(s).__name__ for s in program.steps]
    assert "Extern" in kinds and kinds.count("Segment") == len(program.segments) >= 1
    # + one entry point per kernel (for profiling)
    own = program.source.replace(prelude(), "")  # the prelude declares libm's functions extern "C"
    assert own.count('extern "C"') == len(program.segments) + len(program.kernels)
    assert all(isinstance(s, (Segment, InterpretedKernel, Extern)) for s in program.steps)


def test_graph_without_kernels_has_no_translation_unit():
    plan = lower(trace(lambda x, w: (x @ w,), torch.randn(4, 8), torch.randn(8, 2)), emit_event=False)
    assert build_program(plan).source == ""


def test_a_kernel_with_a_stash_that_cannot_print_is_interpreted_with_its_stash_recomputed(monkeypatch):
    from ember_codegen_cpp import CannotPrint, _program

    class Refuses(_program.KernelPrinter):
        def print(self):
            raise CannotPrint("refused for this test")

    monkeypatch.setattr(_program, "KernelPrinter", Refuses)
    plan = lower(trace(lambda x: (torch.softmax(x, -1),), torch.randn(4, 16)), emit_event=False)
    (step,) = build_program(plan).interpreted
    assert any(b.kind == "local" for b in plan.buffers)
    assert not any(i.buffer == "stash0" for i in step.kernel.instrs())
