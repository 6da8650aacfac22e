"""A KernelPlan as a program: the steps a generated wrapper runs in order, whatever language the kernels are in.

Consecutive kernels that print become one *segment*: a codegen calls a segment's kernels in one go (codegen-cpp
makes it one `extern "C"` function, so the wrapper makes one native call per run of kernels between extern
calls). A kernel the codegen cannot print becomes an `InterpretedKernel` step (the loop-IR interpreter runs it, with
the values it stashed in local buffers recomputed where they are read);
an `Extern` step calls the ATen op.

Every step has a name, which profiler traces and `ember.profile` show: a kernel is `k<step>_<first node it
computes>_<kind>_<shape>` (`k0_softmax_reduce_8x32`; a codegen may prefix it, as codegen-triton does with
`ember_`), an extern call `e<step>_<op>` (`e2_aten.mm.default`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ember_core import source_identifier

from ember_lowering import (
    Buffer,
    Extern,
    Kernel,
    KernelPlan,
    PlanInterpreter,
    Prints,
    decompose_ops,
    recompute_locals,
)

from ._errors import CannotPrint
from ._layout import PlanLayout

log = logging.getLogger("ember.kernels")


@dataclass(frozen=True)
class PrintedKernel:
    """A printed kernel: its function name, the roots it takes (in order), those it writes, its text, and the
    loop-IR kernel it was printed from (`plan_program` fills it in, for a codegen that prints variants of it)."""

    name: str
    roots: tuple[str, ...]
    writes: frozenset[str]
    text: str
    ir: Kernel | None = field(default=None, compare=False, repr=False, kw_only=True)
    # How the kernel's loops use SIMD, in the codegen's words, for the vectorization report ("explicit 16 lanes",
    # "compiler: omp simd", "scalar: ..."); empty where the codegen does not say.
    simd: str = field(default="", compare=False, kw_only=True)
    # what the kernel's pointer parameters point at, in order, where that is not `roots` (a part's own pointer,
    # `KernelWalk.part_pointers`): the call passes each one's root plus its offset
    pointers: tuple[str, ...] = field(default=(), kw_only=True)

    @property
    def params(self) -> tuple[str, ...]:
        return self.pointers or self.roots


@dataclass
class Segment:
    """Kernels run by one call: `name(roots..., symbols...)`; `writes` are the roots a kernel stores to."""

    name: str
    kernels: list[PrintedKernel] = field(default_factory=list)

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r for k in self.kernels for r in k.roots))

    @property
    def writes(self) -> frozenset[str]:
        return frozenset().union(*(k.writes for k in self.kernels))


@dataclass(frozen=True)
class InterpretedKernel:
    """A kernel run by the loop-IR interpreter, and why the codegen does not print it."""

    kernel: Kernel
    reason: str
    name: str = ""


Step = Segment | InterpretedKernel | Extern

# print_kernel(kernel, layout, name) -> PrintedKernel, or CannotPrint
KernelPrinterFn = Callable[[Kernel, PlanLayout, str], PrintedKernel]


@dataclass
class Program:
    """`source` is the kernels' unit in the codegen's language ("" when no kernel printed); the codegen fills
    it in once the steps are known (see `PlanCodegen.unit_source`). `options` are the compile's (`mode` among
    them), for the codegen's hooks to read."""

    plan: KernelPlan
    layout: PlanLayout
    steps: list[Step]
    source: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    # kernel name → its variants as (choice, text), the first the heuristics' (a codegen under a max-autotune
    # mode that prints several ways of one kernel fills it in, and measures them on the first call)
    variants: dict[str, list[tuple[tuple[int, ...], str]]] = field(default_factory=dict)
    # program step index → the name of an extern step (see the module's docstring)
    extern_names: dict[int, str] = field(default_factory=dict)
    # program step index of an extern call → a kernel that computes it together with the first kernel after it
    # (codegen-triton's matmul templates under a max-autotune mode), which the codegen may run in their place
    fused_externs: dict[int, Any] = field(default_factory=dict)
    # the wrapper takes `_take=True` from `CompiledGraph.consume`: it then empties its inputs list once they are
    # checked, and drops each input after its last use (the codegen sets it for a backward: inputs of kind saved)
    consumes: bool = False

    @property
    def segments(self) -> list[Segment]:
        return [s for s in self.steps if isinstance(s, Segment)]

    @property
    def interpreted(self) -> list[InterpretedKernel]:
        return [s for s in self.steps if isinstance(s, InterpretedKernel)]

    @property
    def kernels(self) -> list[PrintedKernel]:
        return [k for s in self.segments for k in s.kernels]

    def extern_name(self, index: int) -> str:
        """The name of the extern call at program step `index`."""
        step = self.steps[index]
        return self.extern_names.get(index) or f"e{index}_{step.op}"


def plan_program(plan: KernelPlan, print_kernel: KernelPrinterFn, prints: Prints | None = None) -> Program:
    """Print every kernel `print_kernel` can; `CannotPrint` only if the plan as a whole cannot run (a layout
    or symbol the wrapper cannot express). `prints(op, operand dtypes, dtype)` says which pointwise instructions the
    codegen has a rule for; the others are composed from their ops' defaults first (`decompose_ops`)."""
    layout = PlanLayout(plan)
    stashes = {b.name for b in plan.buffers if b.kind == "local"}  # the interpreter gets plan buffers only
    steps: list[Step] = []
    extern_names: dict[int, str] = {}
    for k, step in enumerate(plan.steps):
        if isinstance(step, Extern):
            extern_names[len(steps)] = f"e{k}_{step.op}"
            steps.append(step)
            continue
        name = kernel_name(step, k)
        kernel = decompose_ops(step, prints) if prints else step
        try:
            printed = print_kernel(kernel, layout, name)
        except CannotPrint as e:
            log.info("kernel %s of %r runs in the loop-IR interpreter: %s", step.name, plan.name, e)
            steps.append(InterpretedKernel(recompute_locals(step, stashes), str(e), name))
            continue
        if not steps or not isinstance(steps[-1], Segment):
            steps.append(Segment(f"ember_seg{sum(isinstance(s, Segment) for s in steps)}"))
        steps[-1].kernels.append(replace(printed, ir=kernel))
    return Program(plan, layout, steps, extern_names=extern_names)


def kernel_name(kernel: Kernel, step: int) -> str:
    """`k0_softmax_reduce_8x32`: the plan step, the first graph node the kernel computes, its kind and shape."""
    origin = source_identifier(kernel.origins[0]).strip("_") if kernel.origins else ""
    name = source_identifier(kernel.name)
    return f"k{step}_{origin}_{name}" if origin else f"k{step}_{name}"


def interpreted_kernel(plan: KernelPlan, step: InterpretedKernel, touched: list[str], symbols: list[str]) -> Callable:
    """`fn([tensors of touched buffers..., symbol values...])`: the loop-IR interpreter runs the kernel, writing
    into the given tensors (every buffer it touches is an input of a one-kernel plan)."""
    buffers = plan.buffer_map
    bufs = tuple(Buffer(n, buffers[n].dtype, buffers[n].shape, buffers[n].stride, "input") for n in touched)
    sub = plan.replace(buffers=bufs, steps=(step.kernel,), inputs=(*touched, *symbols), outputs=())
    return PlanInterpreter(sub).run
