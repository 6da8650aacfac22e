"""`PlanCodegen`: the flow every codegen of the loop IR shares, Graph → KernelPlan → kernels + wrapper → callable.

Under `mode="reduce-overhead"` (and `"max-autotune"`, which includes it, as in torch.compile) a graph on CUDA comes
back wrapped by `ember_core.cuda_graphed`: replayed as a CUDA graph after a warm-up call.

compile() returns at once: a subclass's binary builds in a worker (or comes from the disk cache) and the
wrapper's first call waits for it, so compiling several graphs before running them builds them in parallel;
`compile_many` does that and waits. Nothing here raises for a graph it cannot build: a kernel the printer
cannot handle runs in the loop-IR interpreter, and a graph that cannot be lowered, wrapped or built runs in
ember-core's interpreter codegen. Each fallback is logged on `ember.kernels` and sent as a `fallback` event.

A subclass (codegen-cpp's `CppCodegen`) provides what is its own:
- `print_kernel(kernel, layout, name) -> PrintedKernel` (or `CannotPrint`),
- `unit_source(program) -> str`: every printed kernel as one unit of its language,
- `wrapper_writer(program, fn_name, constants) -> WrapperWriter` (how a segment is called),
- `start_build(graph, program, writer, env) -> LazyBinding`: its build, bound into the wrapper's globals,
- `shown_source(program) -> str`: the unit as dumps show it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ember_core import (
    CompiledGraph,
    Event,
    Graph,
    Stopwatch,
    cuda_graphed,
    emit,
    load_function,
    register_costs,
    source_identifier,
)

from ember_lowering import Capabilities, Kernel, Op, lower_cached

from ._errors import CannotPrint
from ._fallback import InterpreterFallback, UseFallback, relayout, report_fallback
from ._layout import PlanLayout
from ._lazy import LazyBinding
from ._profiling import program_costs
from ._program import PrintedKernel, Program, plan_program
from ._wrapper import WrapperWriter

GRAPHED_MODES = ("reduce-overhead", "max-autotune")


class PlanCodegen:
    """The shared flow; `name` labels results, `device` is the device type plans must be for, `stage` names the
    codegen in events (`codegen-cpp`) and `language` its kernels in messages (`C++`). `capabilities`: what its
    kernels can do (ember_lowering's `Capabilities`), from which the loop-IR pipeline picks the passes of its
    plans, how long reductions split, and whether reduce-overhead replays the wrapper as a CUDA graph."""

    name = "plan"
    device = "cpu"
    stage = "codegen"
    language = "native"
    capabilities = Capabilities()

    # ------------------------------------------------------------------ what a subclass provides

    def serves(self, device: str) -> bool:
        """Does this codegen run plans for `device` (`cpu`, `cuda:0`)? Default: devices of type `self.device`."""
        return torch.device(device).type == self.device

    def print_kernel(self, kernel: Kernel, layout: PlanLayout, name: str) -> PrintedKernel:
        raise CannotPrint(f"{type(self).__name__} prints no kernels")

    def prints_op(self, op: Op, srcs: tuple[str, ...], dtype: str) -> bool:
        """Has this codegen a rule of its own for pointwise `op` on operands of dtypes `srcs`, giving `dtype`? Every
        other is composed from the op's default before `print_kernel` sees it (loop_passes/decompose_ops.py); a
        codegen's tests check with `missing_ops(codegen.prints_op)` that nothing is left. Default: all of them."""
        return True

    def unit_source(self, program: Program) -> str:
        return "\n".join(k.text for k in program.kernels)

    def wrapper_writer(self, program: Program, fn_name: str, constants: dict[str, torch.Tensor]) -> WrapperWriter:
        return WrapperWriter(program, fn_name, constants)

    def start_build(self, graph: Graph, program: Program, writer: WrapperWriter, env: dict) -> LazyBinding:
        raise NotImplementedError(f"{type(self).__name__} does not say how its kernels are built")

    def shown_source(self, program: Program) -> str:
        return program.source

    # ------------------------------------------------------------------ the codegen protocol

    def compile(self, graph: Graph, example_inputs: Sequence[Any] | None = None,
                options: Mapping[str, Any] | None = None) -> CompiledGraph:
        compiled, _ = self.compile_lazily(graph, options)
        return compiled

    def compile_many(self, graphs: Sequence[Graph], options: Mapping[str, Any] | None = None) -> list[CompiledGraph]:
        """Compile several graphs, their builds running in parallel; returns when every build is bound."""
        results = [self.compile_lazily(g, options) for g in graphs]
        for _, lazy in results:
            if lazy is not None:
                try:
                    lazy.load()
                except UseFallback:
                    pass
        return [c for c, _ in results]

    # ------------------------------------------------------------------ stages

    def compile_lazily(self, graph: Graph, options: Mapping[str, Any] | None = None
                       ) -> tuple[CompiledGraph, LazyBinding | None]:
        """The compiled graph, and the binding its first call waits for (None when no kernel is built). The plan
        comes from lowering's disk cache of plans unless the `cache` option is off."""
        try:
            options = options or {}
            plan = lower_cached(graph, cache=options.get("cache", True), capabilities=self.capabilities,
                                graph_passes=options.get("passes"))
        except Exception as e:  # noqa: BLE001 - any lowering failure means: run the graph as it is
            return self.interpreter(graph, f"lowering failed: {type(e).__name__}: {e}", "lowering"), None
        if not self.serves(plan.device):
            return self.interpreter(graph, f"{self.name} does not serve the plan's device {plan.device!r}",
                                    "device"), None
        clock = Stopwatch()  # printing the kernels and the wrapper, starting the build
        try:
            program = plan_program(plan, self.print_kernel, self.prints_op)
            program.options = dict(options or {})
            program.consumes = any(i.kind == "saved" for i in graph.inputs)  # a backward: see `CompiledGraph`
            program.source = self.unit_source(program) if program.segments else ""
            fn_name = "graph_" + source_identifier(graph.name)
            writer = self.wrapper_writer(program, fn_name, {n: c.tensor for n, c in graph.constants.items()})
            wrapper, env = writer.source()
        except CannotPrint as e:
            return self.interpreter(graph, str(e), "print"), None
        except Exception as e:  # noqa: BLE001 - a bug of this codegen's: reported (tests count it), never fatal
            return self.interpreter(graph, f"printing failed: {type(e).__name__}: {e}", "print"), None
        for step in program.interpreted:
            report_fallback(self.stage, graph, f"kernel {step.kernel.name} runs in the loop-IR interpreter: "
                                               f"{step.reason}", "kernel")
        costs = register_costs(graph.name, self.name, plan.device, program_costs(program))
        env.update(_graph_range=costs.label, _costs=costs)  # the profiled twin's range; alive as long as the wrapper
        fn = self.wrapper_function(graph, wrapper, env, fn_name)
        lazy = self.start_build(graph, program, writer, env) if program.source else None
        shown = self.shown_source(program)
        source = (shown + "\n" if shown else "") + "# ---- wrapper (Python) ----\n" + wrapper
        emit(Event(kind="kernels_generated", stage=self.stage, graph=graph, source=source,
                   message=f"graph {graph.name!r}: {len(program.kernels)} {self.language} kernels in "
                           f"{len(program.segments)} segments, {len(plan.externs)} extern calls, "
                           f"{len(program.interpreted)} interpreted kernels",
                   data={"unit": program.source, "wrapper": wrapper, "seconds": clock.seconds,
                         "range": costs.label, "simd": {k.name: k.simd for k in program.kernels if k.simd}}))
        consume = functools.partial(fn, _take=True) if program.consumes else None
        compiled = CompiledGraph(fn, graph, self.name, source, consume)
        if (options or {}).get("mode") in GRAPHED_MODES and self.capabilities.cuda_graphs and \
                torch.device(plan.device).type == "cuda":  # what CUDA graphs record
            compiled = cuda_graphed(compiled)  # recorded on its second call of each kind, then replayed
        return compiled, lazy

    def wrapper_function(self, graph: Graph, wrapper: str, env: dict, fn_name: str):
        """The wrapper as a function, with its fallbacks bound: the interpreter codegen, and `_relayout`."""
        fallback = InterpreterFallback(graph)
        env.update(_fallback=fallback, _on_error=fallback.on_error)
        fn = load_function(wrapper, env, fn_name, f"{self.name}-{graph.name}")
        env["_relayout"] = functools.partial(relayout, layouts=env["_layouts"], fast=fn, fallback=fallback)
        return fn

    def interpreter(self, graph: Graph, reason: str, cause: str) -> CompiledGraph:
        """The whole graph in ember-core's interpreter codegen, reported as a fallback (of `cause`, one of
        `ember_core.FALLBACK_CAUSES`) and labelled as such."""
        report_fallback(self.stage, graph, f"the graph runs in the interpreter codegen: {reason}", cause)
        return InterpreterFallback(graph).compiled()
