"""`CppCodegen`: the shared `PlanCodegen` flow (ember_lowering.codegen) with C++ kernels: each kernel printed by
`KernelPrinter`, the program as one translation unit (a big one split in parts, a library each, built on several
cores), built into a shared library in the build pool and called through ctypes from the wrapper (see the shared
layer for the flow and its fallbacks). Under a max-autotune mode each kernel is printed in variants, measured on
its first call (`_autotune.py`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from ember_core import CompiledGraph, Graph
from ember_lowering import Kernel
from ember_lowering.codegen import (
    BindError,
    LazyBinding,
    PlanCodegen,
    PlanLayout,
    PrintedKernel,
    Program,
    prints_by_trying,
    report_build,
    tuning_mode,
)

from ._autotune import TunedSegment, print_variants
from ._build import Builder, compiler_version, cpu_tag, wide_vectors
from ._cpp_rules import expression
from ._kernel_printer import KernelPrinter
from ._loader import LazyLibrary, is_loaded
from ._malloc import tune_malloc
from ._prelude import prelude
from ._program import translation_units, unit_lines
from ._wrapper import CppWrapperWriter

log = logging.getLogger("ember.kernels")


class CppCodegen(PlanCodegen):
    """The `cpp` codegen for CPU graphs. `builder` decides flags and compiler (default: `Builder()`)."""

    name = "cpp"
    device = "cpu"
    stage = "codegen-cpp"
    language = "C++"
    # what `cpp_rules` spells; every other op of the table is composed from its default before printing
    prints_op = staticmethod(prints_by_trying(expression))

    def __init__(self, builder: Builder | None = None):
        self.builder = builder or Builder()

    def compile_lazily(self, graph: Graph, options: Mapping[str, Any] | None = None
                       ) -> tuple[CompiledGraph, LazyBinding | None]:
        tune_malloc(options)  # once per process: glibc's thresholds where its own rule ends (`_malloc.py`)
        return super().compile_lazily(graph, options)

    def print_kernel(self, kernel: Kernel, layout: PlanLayout, name: str) -> PrintedKernel:
        return KernelPrinter(kernel, layout, name).print()

    def unit_source(self, program: Program) -> str:
        """The unit, or its parts one after another (see `units`)."""
        if tuning_mode(program.options):
            program.variants = print_variants(program, wide_vectors())
        return "".join(self.units(program))

    def units(self, program: Program) -> list[str]:
        """The sources built apart: one, or a part per pool worker for a unit of several `Builder.part_lines`."""
        return translation_units(program, self.builder.parts(unit_lines(program)))

    def wrapper_writer(self, program: Program, fn_name: str, constants: dict[str, torch.Tensor]) -> CppWrapperWriter:
        return CppWrapperWriter(program, fn_name, constants)

    def shown_source(self, program: Program) -> str:
        """The unit with the prelude folded into one line."""
        return program.source.replace(prelude(), f"// [ember prelude: {prelude().count(chr(10))} lines, "
                                                 "ember_codegen_cpp.prelude()]\n")

    def start_build(self, graph: Graph, program: Program, writer: CppWrapperWriter, env: dict) -> LazyBinding:
        build = self.builder.libraries(self.units(program))
        lazy = LazyLibrary(build, graph, writer.signatures, env)
        if program.variants:
            toolchain = " ".join([*self.builder.flags, compiler_version(self.builder.cxx or ""), cpu_tag()])
            for seg in program.segments:
                env[f"_tune_{seg.name}"] = TunedSegment(program, seg, lazy, env, toolchain)
        report_build(self.stage, graph, build, "library", build.hit or is_loaded(build))
        if build.hit:
            try:
                lazy.bind_now()
                return lazy
            except BindError as e:
                log.warning("loading cached library %s failed (%s); its stubs rebuild it", build.key, e)
        lazy.install_stubs()
        return lazy
