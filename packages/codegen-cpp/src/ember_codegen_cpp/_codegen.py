"""`CppCodegen`: Graph → KernelPlan (ember-lowering) → C++ and a Python wrapper → a CompiledGraph.

compile() returns at once: the library builds in a worker thread (or comes from the disk cache) and the
wrapper's first call waits for it, so compiling several graphs before running them builds them in parallel;
`compile_many` does that and waits. Nothing here raises for a graph it cannot build: a kernel the printer
cannot handle runs in the loop-IR interpreter, and a graph that cannot be lowered, wrapped or built runs in
ember-core's interpreter codegen. Each fallback is logged on `ember.kernels` and sent as a `fallback` event.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ember_core import CompiledGraph, Event, Graph, emit, get_plugin_manager
from ember_lowering import lower

from ._build import Builder
from ._errors import CannotPrint
from ._fallback import InterpreterFallback, UseFallback, relayout, report_fallback
from ._loader import LazyLibrary, bind, is_loaded, load_library
from ._prelude import prelude
from ._program import build_program
from ._wrapper import WrapperWriter, python_function

log = logging.getLogger("ember.kernels")


class CppCodegen:
    """The `cpp` codegen for CPU graphs. `builder` decides flags and compiler (default: `Builder()`)."""

    name = "cpp"

    def __init__(self, builder: Builder | None = None):
        self.builder = builder or Builder()

    def compile(self, graph: Graph, example_inputs: Sequence[Any] | None = None,
                options: Mapping[str, Any] | None = None) -> CompiledGraph:
        compiled, _ = self._compile(graph)
        return compiled

    def compile_many(self, graphs: Sequence[Graph], options: Mapping[str, Any] | None = None) -> list[CompiledGraph]:
        """Compile several graphs, their builds running in parallel; returns when every library is loaded."""
        results = [self._compile(g) for g in graphs]
        for _, lazy in results:
            if lazy is not None:
                try:
                    lazy.load()
                except UseFallback:
                    pass
        return [c for c, _ in results]

    # ------------------------------------------------------------------ stages

    def _compile(self, graph: Graph) -> tuple[CompiledGraph, LazyLibrary | None]:
        try:
            plan = lower(graph)
        except Exception as e:  # noqa: BLE001 - any lowering failure means: run the graph as it is
            return self._interpreter(graph, f"lowering failed: {type(e).__name__}: {e}"), None
        if plan.device != "cpu":
            return self._interpreter(graph, f"the plan is for device {plan.device!r}"), None
        try:
            program = build_program(plan)
            fn_name = "graph_" + "".join(c if c.isalnum() else "_" for c in graph.name)
            writer = WrapperWriter(program, fn_name, {n: c.tensor for n, c in graph.constants.items()})
            wrapper, env = writer.source()
        except CannotPrint as e:
            return self._interpreter(graph, str(e)), None
        for step in program.interpreted:
            report_fallback(graph, f"kernel {step.kernel.name} runs in the loop-IR interpreter: {step.reason}")
        fallback = InterpreterFallback(graph)
        env.update(_fallback=fallback, _on_error=fallback.on_error)
        fn = python_function(wrapper, env, fn_name, graph.name)
        env["_relayout"] = functools.partial(relayout, layouts=env["_layouts"], fast=fn, fallback=fallback)
        lazy = self._library(graph, program.cpp, writer.signatures, env) if program.cpp else None
        shown = program.cpp.replace(prelude(), f"// [ember prelude: {prelude().count(chr(10))} lines, "
                                              "ember_codegen_cpp.prelude()]\n")
        source = (shown + "\n" if program.cpp else "") + "# ---- wrapper (Python) ----\n" + wrapper
        kernels = sum(len(s.kernels) for s in program.segments)
        emit(Event(kind="kernels_generated", stage="codegen-cpp", graph=graph, source=source,
                   message=f"graph {graph.name!r}: {kernels} C++ kernels in {len(program.segments)} segments, "
                           f"{len(plan.externs)} extern calls, {len(program.interpreted)} interpreted kernels",
                   data={"cpp": program.cpp, "wrapper": wrapper}))
        return CompiledGraph(fn, graph, self.name, source), lazy

    def _library(self, graph: Graph, cpp: str, signatures: dict, env: dict) -> LazyLibrary:
        build = self.builder.library(cpp)
        lazy = LazyLibrary(build, graph, signatures, env)
        if build.hit or is_loaded(build.key):
            emit(Event(kind="cache_hit", stage="codegen-cpp", graph=graph,
                       message=f"graph {graph.name!r}: library {build.key[:12]} from the cache"))
        else:
            emit(Event(kind="cache_miss", stage="codegen-cpp", graph=graph,
                       message=f"graph {graph.name!r}: building library {build.key[:12]} ({build.reason})",
                       data={"reason": build.reason}))
        if build.hit:
            try:
                bind(load_library(build.key, str(build.future.result())), signatures, env)
                return lazy
            except OSError as e:
                log.warning("loading cached library %s failed (%s); its stubs will report it", build.key, e)
        lazy.install_stubs()
        return lazy

    def _interpreter(self, graph: Graph, reason: str) -> CompiledGraph:
        report_fallback(graph, reason)
        impl = get_plugin_manager().registry.find("codegen", "interpreter").impl
        compiled = impl.compile(graph, None, {})
        return CompiledGraph(compiled.fn, graph, self.name, compiled.source)
