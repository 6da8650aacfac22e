"""build_program: kernels between externs share one C++ segment; the unit has one extern "C" per segment, and one
entry point per kernel for profiling. A big unit splits in parts of whole segments."""

from __future__ import annotations

import torch
from ember_codegen_cpp import build_program, prelude
from ember_codegen_cpp._program import entry_point, split_segments, translation_units, unit_lines
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


def _chain(x, w):
    """Four segments: kernels between three matmuls."""
    y = (x * 1.5).relu() @ w
    y = y.sigmoid() @ w
    return ((y.tanh() @ w).exp().sum(1),)


def test_a_split_program_is_units_of_whole_segments_each_with_the_prelude():
    plan = lower(trace(_chain, torch.randn(4, 8), torch.randn(8, 8)), emit_event=False)
    program = build_program(plan)
    assert translation_units(program, 1) == [program.source]
    units = translation_units(program, 3)
    assert len(units) == 3 and all(prelude() in u for u in units)
    for seg in program.segments:  # each segment, its kernels and their entry points in exactly one part
        (home,) = [u for u in units if f" int {seg.name}(" in u]
        for k in seg.kernels:
            assert sum(f"static int {k.name}(" in u for u in units) == 1 and f"static int {k.name}(" in home
            assert f"int {entry_point(k.name)}(" in home


def test_segments_split_in_contiguous_groups_of_about_equal_lines():
    plan = lower(trace(_chain, torch.randn(4, 8), torch.randn(8, 8)), emit_event=False)
    program = build_program(plan)
    groups = split_segments(program, 2)
    assert [s for g in groups for s in g] == program.segments and len(groups) == 2
    assert split_segments(program, 10) == [[s] for s in program.segments]  # never more parts than segments
    assert unit_lines(program) > 0
