"""A KernelPlan as a program: one C++ translation unit, and the steps the Python wrapper runs in order.

Consecutive kernels that print become one *segment*: an `extern "C"` function calling them in turn, so the
wrapper makes one ctypes call per run of kernels between extern calls. A kernel the printer cannot handle
becomes an `InterpretedKernel` step (the loop-IR interpreter runs it); an `Extern` step calls the ATen op.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ember_lowering import Extern, Kernel, KernelPlan, recompute_locals

from ._cpp_rules import STORAGE_CTYPE
from ._errors import CannotPrint
from ._kernel_printer import CKernel, KernelPrinter
from ._layout import PlanLayout
from ._prelude import prelude

log = logging.getLogger("ember.kernels")


@dataclass
class Segment:
    """Kernels run by one C++ call: `name(roots..., symbols...)`; `writes` are the roots a kernel stores to."""

    name: str
    kernels: list[CKernel] = field(default_factory=list)

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r for k in self.kernels for r in k.roots))

    @property
    def writes(self) -> frozenset[str]:
        return frozenset().union(*(k.writes for k in self.kernels))


@dataclass(frozen=True)
class InterpretedKernel:
    """A kernel run by the loop-IR interpreter, and why it is not C++."""

    kernel: Kernel
    reason: str


Step = Segment | InterpretedKernel | Extern


@dataclass
class Program:
    plan: KernelPlan
    layout: PlanLayout
    steps: list[Step]
    cpp: str  # the translation unit ("" when no kernel printed)

    @property
    def segments(self) -> list[Segment]:
        return [s for s in self.steps if isinstance(s, Segment)]

    @property
    def interpreted(self) -> list[InterpretedKernel]:
        return [s for s in self.steps if isinstance(s, InterpretedKernel)]


def build_program(plan: KernelPlan) -> Program:
    """Print every kernel it can; `CannotPrint` only if the plan as a whole cannot run (a layout or symbol
    the wrapper cannot express)."""
    layout = PlanLayout(plan)
    steps: list[Step] = []
    for k, step in enumerate(plan.steps):
        if isinstance(step, Extern):
            steps.append(step)
            continue
        try:
            ck = KernelPrinter(step, layout, f"k{k}_{_ident(step.name)}").print()
        except CannotPrint as e:
            log.info("kernel %s of %r runs in the loop-IR interpreter: %s", step.name, plan.name, e)
            steps.append(InterpretedKernel(recompute_locals(step, set(_locals(plan))), str(e)))
            continue
        if not steps or not isinstance(steps[-1], Segment):
            steps.append(Segment(f"ember_seg{sum(isinstance(s, Segment) for s in steps)}"))
        steps[-1].kernels.append(ck)
    program = Program(plan, layout, steps, "")
    program.cpp = translation_unit(program) if program.segments else ""
    return program


def _locals(plan: KernelPlan) -> list[str]:
    """The plan's per-row stashes; the wrapper hands the interpreter plan buffers only."""
    return [b.name for b in plan.buffers if b.kind == "local"]


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def segment_params(program: Program, seg: Segment) -> list[str]:
    layout = program.layout
    params = []
    for r in seg.roots:
        const = "" if r in seg.writes else "const "
        params.append(f"{const}{STORAGE_CTYPE[layout.buffers[r].dtype]}* {layout.local[r]}")
    return params + [f"int64_t {layout.sym_local[s]}" for s in layout.symbols]


def translation_unit(program: Program) -> str:
    """The whole source: prelude, kernels, segments. No graph name in it: the same kernels share a build."""
    layout = program.layout
    kernels = [k for seg in program.segments for k in seg.kernels]
    out = [f"// ember codegen-cpp: {len(kernels)} kernels", prelude()]
    out += [k.text + "\n" for k in kernels]
    syms = [layout.sym_local[s] for s in layout.symbols]
    for seg in program.segments:
        params = ", ".join(segment_params(program, seg)) or "void"
        out.append(f'extern "C" __attribute__((visibility("default"))) int {seg.name}({params}) {{')
        out.append("  int e;")
        for k in seg.kernels:
            args = ", ".join([layout.local[r] for r in k.roots] + syms)
            out.append(f"  if ((e = {k.name}({args}))) return e;")
        out.append("  return 0;\n}\n")
    return "\n".join(out)
