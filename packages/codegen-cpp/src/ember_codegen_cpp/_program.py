"""A KernelPlan as a C++ program: the shared layer's steps (segments of printed kernels, interpreted kernels,
extern calls) and one translation unit holding every kernel (or, under max-autotune, its variants and the
pointer that picks one: `_autotune.py`), one `extern "C"` function per segment, which the wrapper calls, and one
entry point per kernel (`ember_run_<kernel>`), which only the wrapper's profiled twin calls, a kernel at a time.

A big unit (a training graph's backward: thousands of lines, seconds of g++ on one core) is split into parts
(`translation_units`): whole segments, contiguous and of about equal lines, each part a unit of its own with the
prelude, its segments' kernels, the segments and the kernels' entry points. Kernels stay `static` (a segment and
its kernels are always in one part), so each part builds and loads as a library of its own (see `_build.py`).

Kernels of one body (repeated layers) are printed once per unit: the others are references to the first
(`static constexpr auto& k23_gelu_2 = k15_gelu_1;`), so g++ compiles each body once (the shared layer's
`same_kernels`). Kernels printed in variants under max-autotune are measured by name and stay apart.
"""

from __future__ import annotations

import functools

from ember_lowering import KernelPlan
from ember_lowering.codegen import PrintedKernel, Program, Segment, plan_program, same_kernels, with_placeholders

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


def kernel_args(program: Program, k: PrintedKernel) -> list[str]:
    """What a call passes the kernel: each pointer it takes (a part's: its root's plus the part's offset), then the
    symbols."""
    layout, out = program.layout, []
    for p in k.params:
        root = layout.root(p)
        offset = layout.rel_offset(p)
        out.append(layout.local[root] if offset == 0 else f"{layout.local[root]} + {offset}")
    return out + [layout.sym_local[s] for s in layout.symbols]


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
    same = same_bodies(program, program.kernels)
    return sum(_lines(program, s, same) for s in program.segments)


def _lines(program: Program, seg: Segment, same: dict[str, str]) -> int:
    """The lines of the segment's kernels, a kernel of an earlier one's body counted as one."""
    texts = [t for k in seg.kernels for t in ([v for _, v in program.variants.get(k.name, ())] or
                                               [k.text if same.get(k.name, k.name) == k.name else ""])]
    return sum(t.count("\n") + 1 for t in texts)


def same_bodies(program: Program, kernels: list[PrintedKernel]) -> dict[str, str]:
    """Each kernel's name → the first of `kernels` with its body (see the module docstring); kernels printed in
    variants are left out."""
    layout = program.layout
    stashes = frozenset(layout.local[n] for n, b in layout.buffers.items() if b.kind == "local")  # in a kernel
    return same_kernels([k for k in kernels if k.name not in program.variants],
                        lambda k: _canonical(k.text, k.name, tuple(layout.local[r] for r in k.params), stashes))


@functools.lru_cache(maxsize=1024)  # a program's units are printed several times (lines, parts, each unit)
def _canonical(text: str, name: str, params: tuple[str, ...], stashes: frozenset[str]) -> str:
    head, _, body = text.partition("\n")
    head = head.partition(" {")[0].replace(f" {name}(", " (", 1)  # no name, no origins comment (after the brace)
    return with_placeholders(head + "\n" + body, params, stashes)


def split_segments(program: Program, parts: int) -> list[list[Segment]]:
    """The segments in at most `parts` contiguous groups of about equal lines: a segment goes to the share of the
    lines its middle line falls in."""
    segments = program.segments
    same = same_bodies(program, program.kernels)
    weights = [_lines(program, s, same) for s in segments]
    total = sum(weights) or 1
    groups: dict[int, list[Segment]] = {}
    done = 0
    for seg, w in zip(segments, weights):
        groups.setdefault(min(parts - 1, int((done + w / 2) * parts / total)), []).append(seg)
        done += w
    return list(groups.values())


def _unit(program: Program, segments: list[Segment], header: str) -> str:
    """A unit of `segments`: prelude, their kernels, the segments, the kernels' entry points."""
    kernels = [k for s in segments for k in s.kernels]
    out = [header, prelude()]
    same = same_bodies(program, kernels)
    for k in kernels:
        variants = program.variants.get(k.name)
        if not variants:
            first = same[k.name]
            out.append(k.text + "\n" if first == k.name else
                       f"static constexpr auto& {k.name} = {first};  // the same kernel\n")
            continue
        out += [text + "\n" for _, text in variants]
        out += dispatch_source(k.name, len(variants), root_params(program, k.roots, k.writes),
                               kernel_args(program, k))
    for seg in segments:
        params = ", ".join(segment_params(program, seg)) or "void"
        out.append(f'extern "C" __attribute__((visibility("default"))) int {seg.name}({params}) {{')
        out.append("  int e;")
        for k in seg.kernels:
            out.append(f"  if ((e = {k.name}({', '.join(kernel_args(program, k))}))) return e;")
        out.append("  return 0;\n}\n")
    for k in kernels:  # for profiling: each kernel alone
        params = ", ".join(root_params(program, k.roots, k.writes)) or "void"
        args = ", ".join(kernel_args(program, k))
        out.append(f'extern "C" __attribute__((visibility("default"))) int {entry_point(k.name)}({params}) '
                   f"{{ return {k.name}({args}); }}")
    return "\n".join(out) + "\n"


def entry_point(kernel: str) -> str:
    """The exported function that runs one kernel alone."""
    return f"ember_run_{kernel}"
