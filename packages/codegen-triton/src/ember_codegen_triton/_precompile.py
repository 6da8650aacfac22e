"""Compiling a program's kernels for the GPU as part of its build, all at once: in worker processes where there are
cores to spare (`_compile_workers.py`), then in threads.

Left alone, Triton compiles a kernel on its first launch, one after another in the launching thread, and a kernel
it cannot compile raises from inside the wrapper. ember compiles them in the build instead (the wrapper's first
call waits for it, as it waits for codegen-cpp's compiler): every kernel of the program is warmed up in a thread
pool (Triton's own compiler drops the GIL for its passes and runs ptxas as a subprocess), with the argument types
its launches pass and the specialization they will most likely have: pointers 16-byte aligned (as the caching
allocator gives them), symbols at their traced hints. The launch then finds its binary in Triton's cache; one
whose arguments specialize otherwise (an input view at an odd offset) compiles at its launch, as Triton would.

A kernel Triton cannot compile fails the build with the compiler's message: the graph runs in the interpreter
codegen (each node one ATen call), reported as a `fallback` event that carries the message.

Triton keeps its binaries in `<ember cache>/triton_jit` (0700, owner checked, like every ember cache) unless
`TRITON_CACHE_DIR` says otherwise.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

import torch
import triton
from ember_core import private_cache_dir, to_dtype
from ember_lowering.codegen import BuildError, PlanLayout
from triton.runtime.driver import driver

from ._binaries import manifest
from ._compile_workers import prefill, workers
from ._kernel_printer import TritonKernel
from ._wrapper import launch_meta

CACHE_NAME = "triton_jit"
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def use_ember_cache_dir() -> None:
    """Point Triton's cache into ember's private cache directory, unless the user chose one (TRITON_CACHE_DIR)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return
    triton.knobs.cache.dir = str(private_cache_dir(CACHE_NAME))  # also sets TRITON_CACHE_DIR for subprocesses


def current_target() -> str:
    """The device Triton compiles for now (`cuda:90`)."""
    target = triton.runtime.driver.active.get_current_target()
    return f"{target.backend}:{target.arch}"


def precompile(module: ModuleType, kernels: Sequence[TritonKernel], layout: PlanLayout, debug: bool,
               sync: bool, source: str | None = None) -> bytes:
    """Compile each kernel of `module` (whose text is `source`) for the current device, in parallel: first in the
    compile workers' processes where there are any (`_compile_workers.py`), then in threads, which load what the
    workers compiled and compile the rest; BuildError naming every kernel that failed, with the compiler's
    message. Returns the binaries' manifest (`_binaries.py`), which the module's cache entry keeps."""
    _cache_keys(module, kernels)
    keys = {k.name: _compile_key(module, k, layout, debug, sync) for k in kernels}
    distinct: dict[tuple, TritonKernel] = {}  # one kernel per binary: the first of those sharing a key
    for k in kernels:
        distinct.setdefault(keys[k.name], k)
    if source is not None and workers() > 0:
        target = driver.active.get_current_target()
        jobs = [(k.name, warmup_args(k, layout, sync), launch_meta(k, debug, sync)) for k in distinct.values()]
        prefill(source, module.__file__, (target.backend, target.arch, target.warp_size), triton.knobs.cache.dir,
                jobs)
    futures = {key: _threads().submit(_warm_up, getattr(module, k.name), k, layout, debug, sync)
               for key, k in distinct.items()}
    failed, compiled = [], {}
    for k in kernels:
        future = futures[keys[k.name]]
        try:
            compiled[k.name] = future.result()
        except Exception:  # noqa: BLE001 - tried again alone, below
            try:  # a kernel that failed among others is compiled again by itself before it counts as failed
                compiled[k.name] = _warm_up(getattr(module, k.name), k, layout, debug, sync)
            except Exception as e:  # noqa: BLE001 - whatever Triton raises: the kernel cannot run, ATen will
                failed.append(f"kernel {k.name}: {type(e).__name__}: {e}")
    if failed:
        raise BuildError("Triton could not compile " + "; ".join(failed))
    return manifest(compiled, triton.knobs.cache.dir)


def _compile_key(module: ModuleType, k: TritonKernel, layout: PlanLayout, debug: bool, sync: bool) -> tuple:
    """What decides k's binary: its function (kernels of one body share one, `_dedup.py`), its launches' argument
    types and specialization, and its launch options."""
    meta = launch_meta(k, debug, sync)
    return (getattr(module, k.name).__name__, repr(warmup_args(k, layout, sync)), repr(sorted(meta.items())))


def _cache_keys(module: ModuleType, kernels: Sequence[TritonKernel]) -> list[str]:
    """Each kernel's Triton cache key, computed one at a time before the threads start. Triton computes a key once
    per function, with a placeholder in place while it does: two threads that need a shared helper's key at once
    can take the placeholder into a kernel's key, and that kernel then misses the binary a worker stored for it
    (and would under that key in every later process)."""
    return [getattr(module, k.name).cache_key for k in kernels]


def warmup_args(k: TritonKernel, layout: PlanLayout, sync: bool) -> list:
    """What a launch of `k` passes, as types: root dtypes (Triton's warmup takes a torch dtype for a tensor), the
    error flag (None where the launch reads none), and each symbol's traced hint."""
    hints = {s.name: s.hint for s in layout.plan.symbols}
    dtypes: list = [to_dtype(layout.buffers[r].dtype) for r in k.roots]
    return dtypes + ([torch.int32 if sync else None] if k.checks else []) + [hints[s] for s in layout.symbols]


def _warm_up(fn, k: TritonKernel, layout: PlanLayout, debug: bool, sync: bool):
    """Compile (or find in Triton's caches) `k` as its launches will most likely need it; the compiled kernel."""
    return warm_up(fn, k, warmup_args(k, layout, sync), debug, sync)


def warm_up(fn, k: TritonKernel, args: list, debug: bool, sync: bool):
    return compile_for(fn, args, launch_meta(k, debug, sync))


def compile_for(fn, args: list, meta: dict, grid: tuple[int, ...] = (1,)):
    """`fn` compiled (or found in Triton's caches) for a launch with runtime arguments `args` (as types) and keywords
    `meta` on a grid of `grid`'s rank; the compiled kernel."""
    compiled = fn.warmup(*args, grid=grid, **meta)
    return compiled.result() if hasattr(compiled, "result") else compiled  # Triton's asynchronous compile mode


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 1), thread_name_prefix="ember-triton-jit")
        return _pool
