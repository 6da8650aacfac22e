"""`TritonCodegen`: the shared `PlanCodegen` flow (ember_lowering.codegen) with Triton kernels: each kernel printed by
`TritonKernelPrinter`, the program as one Python module of `@triton.jit` functions stored in the disk cache, and a
wrapper that launches them on grids computed from the call's sizes.

On a GPU, the build compiles every kernel of the program in parallel (`_precompile.py`); a kernel Triton cannot
compile sends the graph to the interpreter codegen, reported with the compiler's message.

It serves CUDA graphs, and CPU graphs when `TRITON_INTERPRET=1` (Triton's interpreter runs the same kernels on
CPU tensors: how CI tests it without a GPU; `options={"codegen.cpu": "triton"}`).
"""

from __future__ import annotations

import logging
import os

import torch
import triton
from ember_core import CacheLookup, Graph, direct_call, graph_device, resolve_op, to_dtype
from ember_lowering import Kernel
from ember_lowering.codegen import (
    LazyBinding,
    PlanCodegen,
    PlanLayout,
    PrintedKernel,
    Program,
    prints_by_trying,
    report_build,
    tuning_mode,
)
from triton.runtime.driver import driver

from ._autotune import TunedGemm, tuned_kernels
from ._binaries import BadManifest
from ._binaries import load as load_binaries
from ._build import import_module, module_build
from ._capabilities import TRITON_CAPABILITIES
from ._compile_workers import start as start_compile_workers
from ._dedup import module_text
from ._gemm import find_templates
from ._kernel_printer import TritonKernel, TritonKernelPrinter
from ._launcher import launch_signature, make_launcher, stream_reader
from ._parse_lock import lock_triton_parses
from ._precompile import compile_for, current_target, precompile, use_ember_cache_dir, warm_up, warmup_args
from ._rules import INTERPRETER_LIBDEVICE, LIBDEVICE, PRELUDE, expression
from ._wrapper import TritonWrapperWriter, launch_meta

log = logging.getLogger("ember.kernels")
# configurations a tuned kernel or matmul template tries in Triton's interpreter, where timings say nothing of a GPU
INTERPRETER_CONFIGS = 2


def interpreting() -> bool:
    """Does Triton run kernels in its CPU interpreter (`TRITON_INTERPRET=1`)?"""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TritonCodegen(PlanCodegen):
    """The `triton` codegen: the default for CUDA graphs."""

    name = "triton"
    device = "cuda"
    stage = "codegen-triton"
    language = "Triton"
    capabilities = TRITON_CAPABILITIES
    # what `_rules.py` spells; every other op of the table is composed from its default before printing
    prints_op = staticmethod(prints_by_trying(expression))

    def serves(self, device: str) -> bool:
        kind = torch.device(device).type
        return kind == "cuda" or (kind == "cpu" and interpreting())

    def print_kernel(self, kernel: Kernel, layout: PlanLayout, name: str) -> PrintedKernel:
        return TritonKernelPrinter(kernel, layout, kernel_name(kernel, name)).print()

    def unit_source(self, program: Program) -> str:
        """The module: the prelude, the kernels, and under a max-autotune mode the matmul templates (`_gemm.py`)."""
        libdevice = INTERPRETER_LIBDEVICE if interpreting() else LIBDEVICE
        if tuning_mode(program.options) and program.options.get("triton.gemm_templates", "measure") != "never":
            program.fused_externs = find_templates(program, interpreting())
        functions = [*program.kernels, *program.fused_externs.values()]  # repeated layers share one function each
        return PRELUDE.replace("import triton.language as tl\n", f"import triton.language as tl\n{libdevice}\n", 1) \
            + "\n\n" + module_text(functions) + "\n"

    def lean_launch(self, program: Program) -> bool:
        """Do the program's kernels launch through lean launchers (`_launcher.py`)? On CUDA unless option
        `triton.launch` is `"jit"` (Triton's own `kernel[grid](...)`, as in Triton's interpreter)."""
        return (program.options.get("triton.launch", "lean") == "lean" and not interpreting()
                and torch.device(program.plan.device).type == "cuda" and lean_launch_supported())

    def compile_lazily(self, graph: Graph, options=None):
        lock_triton_parses()  # the build's threads, the tuner and the launches all parse Triton functions
        if not interpreting() and torch.device(graph_device(graph)).type == "cuda":
            start_compile_workers()  # they import torch and Triton while this graph is lowered and printed
        return super().compile_lazily(graph, options)

    def wrapper_writer(self, program: Program, fn_name: str, constants: dict[str, torch.Tensor]):
        writer = TritonWrapperWriter(program, fn_name, constants)
        writer.lean = self.lean_launch(program)
        writer.globals["_cdiv"] = triton.cdiv
        writer.globals["_error_flag"] = _error_flag
        if writer.tuned:
            env, layout, debug, sync = writer.globals, program.layout, writer.debug, writer.sync_checks
            lean = (lambda k: lean_launcher(bound(env, k.name), k, layout, debug, sync)) if writer.lean else None
            tried = INTERPRETER_CONFIGS if interpreting() else None
            writer.globals.update(tuned_kernels(program.kernels, env, debug, sync, lean, tried))
            measure = program.options.get("triton.gemm_templates", "measure") == "measure"
            kernels = {k.name: k for k in program.kernels}
            for index, t in program.fused_externs.items():
                extern = direct_call(resolve_op(program.steps[index].op))
                chosen = (lambda c, t=t: template_launcher(bound(env, t.name), t, c, layout)) if writer.lean else None
                env[f"_gemm_{t.name}"] = TunedGemm(env, t, kernels[t.epilogue], extern, measure, chosen, tried)
        return writer

    def start_build(self, graph: Graph, program: Program, writer, env: dict) -> LazyBinding:
        kernels, layout, debug, sync = program.kernels, program.layout, writer.debug, writer.sync_checks
        if interpreting():
            build = module_build(program.source)
        else:
            use_ember_cache_dir()  # before any kernel compiles or loads, on a hit as on a miss
            source = program.source
            build = module_build(source, lambda module: precompile(module, kernels, layout, debug, sync, source),
                                 f"{current_target()} debug={debug} sync={sync}")
        report_build(self.stage, graph, build, "module")
        kernels_by_name = {k.name: k for k in program.kernels}
        templates = [t.name for t in program.fused_externs.values()]
        lean = writer.lean and not writer.tuned  # a tuned program makes the chosen configurations' launchers
        names = [*kernels_by_name, *templates] + (["_lean_stream"] if writer.lean else [])
        names += [f"_launch_{k}" for k in kernels_by_name] if lean else []

        def bind(found: CacheLookup, env: dict) -> None:
            module = import_module(build.key, found)
            for name in [*kernels_by_name, *templates]:
                env[name] = getattr(module, name)
            if writer.lean:
                env["_lean_stream"] = stream_reader(driver.active.get_current_device(), driver.active,
                                                    triton.knobs.runtime)
            if not lean:
                return
            built = prebuilt(found, {name: env[name] for name in kernels_by_name}, graph)
            for name, k in kernels_by_name.items():
                env[f"_launch_{name}"] = lean_launcher(env[name], k, layout, debug, sync, built.get(name))

        lazy = KernelBinding(build, graph, names, env, bind, self.stage)
        lazy.install_stubs()
        return lazy


class KernelBinding(LazyBinding):
    """Stubs that the wrapper indexes with a grid, as it does a Triton kernel (`k[grid](...)`); the lean launchers'
    and `_lean_stream`'s stubs are plain functions."""

    def _stub(self, name: str):
        if name.startswith("_"):
            return super()._stub(name)
        return KernelStub(self, name)


class KernelStub:
    """A kernel's name in the wrapper's globals until its binding loads: indexed with a grid, or asked for the
    kernel (`bound`), it waits for the build and gives the kernel."""

    def __init__(self, binding: LazyBinding, name: str):
        self.binding, self.name = binding, name

    def bound(self):
        self.binding.load()
        return self.binding.env[self.name]

    def __getitem__(self, grid):
        return self.bound()[grid]


def bound(env: dict, name: str):
    """The kernel `name` of a wrapper's globals, its binding loaded first if it has not been."""
    fn = env[name]
    return fn.bound() if isinstance(fn, KernelStub) else fn


def lean_launch_supported() -> bool:
    """Does this Triton launch compiled kernels the way `_launcher.py` calls them (`knobs.runtime` holds the launch
    hooks, `CompiledKernel.run` takes every parameter after the hooks: Triton 3.4 and later)?"""
    return hasattr(getattr(triton, "knobs", None), "runtime")


def prebuilt(found: CacheLookup, functions: dict, graph: Graph) -> dict:
    """The program's compiled kernels as its build's manifest finds them (`_binaries.py`), without Triton's JIT;
    none where the manifest is unusable (logged: each kernel then goes through the JIT)."""
    try:
        return load_binaries(found.data.get("bins", b""), functions, triton.knobs.cache.dir)
    except BadManifest as e:
        log.warning("graph %r: the Triton module's binaries manifest %s is unusable (%s); its kernels load through "
                    "Triton's JIT", graph.name, found.files.get("bins"), e)
        return {}


def lean_launcher(jit, k: TritonKernel, layout: PlanLayout, debug: bool, sync: bool, compiled=None):
    """`k`'s lean launcher over the binary its build compiled: `compiled`, found by the build's manifest, else
    through Triton's JIT and caches."""
    args = warmup_args(k, layout, sync)
    if compiled is None:
        compiled = warm_up(jit, k, args, debug, sync)
    params = [(p.name, bool(p.is_constexpr)) for p in jit.params]
    return make_launcher(launch_signature(k.name, params, args, launch_meta(k, debug, sync)), compiled, jit)


def template_launcher(jit, t, config: tuple[int, ...], layout: PlanLayout):
    """Matmul template `t`'s lean launcher in tile configuration `config` (`_gemm.py`), on a 2-d grid (tiles,
    batch), over the binary Triton's JIT compiles or finds for it."""
    bm, bn, bk, warps, stages = config
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}
    hints = {s.name: s.hint for s in layout.plan.symbols}
    args = [to_dtype(layout.buffers[r].dtype) for r in t.roots] + [hints[s] for s in layout.symbols]
    compiled = compile_for(jit, args, meta, grid=(1, 1))
    params = [(p.name, bool(p.is_constexpr)) for p in jit.params]
    return make_launcher(launch_signature(t.name, params, args, meta, grid_dims=2), compiled, jit)


def _error_flag(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.int32, device=device)


def kernel_name(kernel: Kernel, name: str) -> str:
    """`ember_k0_softmax_reduce_8x32`: the shared layer's name (the step, the first graph node the kernel
    computes, its kind and shape), marked as ember's where CUDA profiler traces list it among every kernel."""
    return f"ember_{name}"
