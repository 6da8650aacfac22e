"""A KernelPlan as a C++ program: the shared layer's steps (segments of printed kernels, interpreted kernels,
extern calls) and one translation unit holding every kernel (or, under max-autotune, its variants and the
pointer that picks one: `_autotune.py`), one `extern "C"` function per segment, which the wrapper calls, and one
entry point per kernel (`ember_run_<kernel>`), which only the wrapper's profiled twin calls, a kernel at a time."""

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
    layout = program.layout
    kernels = program.kernels
    out = [f"// ember codegen-cpp: {len(kernels)} kernels", prelude()]
    syms = [layout.sym_local[s] for s in layout.symbols]
    for k in kernels:
        variants = program.variants.get(k.name)
        if not variants:
            out.append(k.text + "\n")
            continue
        out += [text + "\n" for _, text in variants]
        args = [layout.local[r] for r in k.roots] + syms
        out += dispatch_source(k.name, len(variants), root_params(program, k.roots, k.writes), args)
    for seg in program.segments:
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
