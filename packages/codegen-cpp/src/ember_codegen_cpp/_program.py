"""A KernelPlan as a C++ program: the shared layer's steps (segments of printed kernels, interpreted kernels,
extern calls) and one translation unit holding every kernel (or, under max-autotune, its variants and the
pointer that picks one: `_autotune.py`), one `extern "C"` function per segment, which the wrapper calls, and one
entry point per kernel (`ember_run_<kernel>`), which only the wrapper's profiled twin calls, a kernel at a time.

A big unit (a training graph's backward: thousands of lines, seconds of g++ on one core) is split into parts
(`translation_units`): whole segments, contiguous and of about equal lines, each part a unit of its own with the
prelude, its segments' kernels, the segments and the kernels' entry points. Kernels stay `static` (a segment and
its kernels are always in one part), so each part builds and loads as a library of its own (see `_build.py`).
"""

from __future__ import annotations

from ember_lowering import KernelPlan
from ember_lowering.codegen import Program, Segment, plan_program

from ._autotune import dispatch_source
from ._cpp_rules import STORAGE_CTYPE
from ._kernel_printer import KernelPrinter
from ._prelude import prelude


def build_program(plan: KernelPlan) -> Program:
    """The plan's steps with every kernel the C++ printer handles printed, and their translation unit."""
    program = plan_program(plan, lambda kernel, layout, name: KernelPrinter(kernel, layout, name).print())
    program.source = translation_unit(program) if program.segments else ""
    return program


def segment_params(program: Program, seg: Segment) -> list[str]:
    return root_params(program, seg.roots, seg.writes)


def root_params(program: Program, roots, writes) -> list[str]:
    """C++ parameters taking `roots` (const unless in `writes`), then the plan's symbols."""
    layout = program.layout
    params = []
    for r in roots:
        const = "" if r in writes else "const "
        params.append(f"{const}{STORAGE_CTYPE[layout.buffers[r].dtype]}* {layout.local[r]}")
    return params + [f"int64_t {layout.sym_local[s]}" for s in layout.symbols]


def translation_unit(program: Program) -> str:
    """The whole source: prelude, kernels, segments. No graph name in it: the same kernels share a build."""
    return _unit(program, program.segments, f"// ember codegen-cpp: {len(program.kernels)} kernels")


def translation_units(program: Program, parts: int) -> list[str]:
    """The program as at most `parts` units (one: `translation_unit`), each of whole segments, about equal lines."""
    groups = split_segments(program, parts)
    if len(groups) == 1:
        return [translation_unit(program)]
    return [_unit(program, g, f"// ember codegen-cpp: part {j + 1} of {len(groups)}, "
                              f"{sum(len(s.kernels) for s in g)} kernels") for j, g in enumerate(groups)]


def unit_lines(program: Program) -> int:
    """The lines of the kernels (all variants), which is what a build spends its time on."""
    return sum(_lines(program, s) for s in program.segments)


def _lines(program: Program, seg: Segment) -> int:
    texts = [t for k in seg.kernels for t in ([v for _, v in program.variants.get(k.name, ())] or [k.text])]
    return sum(t.count("\n") + 1 for t in texts)


def split_segments(program: Program, parts: int) -> list[list[Segment]]:
    """The segments in at most `parts` contiguous groups of about equal lines: a segment goes to the share of the
    lines its middle line falls in."""
    segments = program.segments
    weights = [_lines(program, s) for s in segments]
    total = sum(weights) or 1
    groups: dict[int, list[Segment]] = {}
    done = 0
    for seg, w in zip(segments, weights):
        groups.setdefault(min(parts - 1, int((done + w / 2) * parts / total)), []).append(seg)
        done += w
    return list(groups.values())


def _unit(program: Program, segments: list[Segment], header: str) -> str:
    """A unit of `segments`: prelude, their kernels, the segments, the kernels' entry points."""
    layout = program.layout
    kernels = [k for s in segments for k in s.kernels]
    out = [header, prelude()]
    syms = [layout.sym_local[s] for s in layout.symbols]
    for k in kernels:
        variants = program.variants.get(k.name)
        if not variants:
            out.append(k.text + "\n")
            continue
        out += [text + "\n" for _, text in variants]
        args = [layout.local[r] for r in k.roots] + syms
        out += dispatch_source(k.name, len(variants), root_params(program, k.roots, k.writes), args)
    for seg in segments:
        params = ", ".join(segment_params(program, seg)) or "void"
        out.append(f'extern "C" __attribute__((visibility("default"))) int {seg.name}({params}) {{')
        out.append("  int e;")
        for k in seg.kernels:
            args = ", ".join([layout.local[r] for r in k.roots] + syms)
            out.append(f"  if ((e = {k.name}({args}))) return e;")
        out.append("  return 0;\n}\n")
    for k in kernels:  # for profiling: each kernel alone
        params = ", ".join(root_params(program, k.roots, k.writes)) or "void"
        args = ", ".join([layout.local[r] for r in k.roots] + syms)
        out.append(f'extern "C" __attribute__((visibility("default"))) int {entry_point(k.name)}({params}) '
                   f"{{ return {k.name}({args}); }}")
    return "\n".join(out) + "\n"


def entry_point(kernel: str) -> str:
    """The exported function that runs one kernel alone."""
    return f"ember_run_{kernel}"
