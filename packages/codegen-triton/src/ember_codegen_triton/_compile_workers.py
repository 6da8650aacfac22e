"""Compiling a program's kernels in worker processes, before the build's threads warm them up.

Triton's front end (walking the kernel's Python AST, building its first IR) holds the GIL, so the build's threads
(`_precompile.py`) overlap only what runs outside it (MLIR passes, ptxas). Where there are cores to spare, the build
first hands each kernel to a pool of worker processes, which compile it for the same target into the same Triton
cache; the threads' warm-up then finds each binary there and only loads it.

The pool only fills the cache, so nothing depends on it: a kernel a worker could not compile, a worker that died, a
pool that did not start or a cache key that came out otherwise in the worker (an environment variable set since it
started) leaves the kernel to the threads, which compile it and report its errors as they always did.

Workers are spawned (not forked: the parent may hold a CUDA context) once per process and kept. They never touch
the GPU: each sets a driver that names the parent's target and compiles for it. How many: `EMBER_TRITON_COMPILE_WORKERS`
(0 turns the pool off), by default one per core beyond the first, at most 8, and none below 4 cores.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger("ember.kernels")

WORKERS_ENV = "EMBER_TRITON_COMPILE_WORKERS"
WAIT_S = 600.0  # the longest the build waits for the workers before its threads compile what is left
Job = tuple[str, list, dict]  # (kernel name, warm-up arguments, launch keywords)

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


def workers() -> int:
    """How many worker processes compile kernels (see the module's docstring)."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        try:
            return max(0, int(text))
        except ValueError:
            log.warning("%s=%r is not a number of processes; the pool stays off", WORKERS_ENV, text)
            return 0
    cores = os.cpu_count() or 1
    return min(8, cores - 1) if cores >= 4 else 0


def prefill(source: str, filename: str, target: tuple[str, Any, int], cache_dir: str, jobs: Sequence[Job]) -> int:
    """Compile `jobs` (kernels of the module `source`, loaded as `filename`) for `target` (backend, arch, warp size)
    into Triton's cache `cache_dir`, in the worker processes; returns how many they compiled. Never raises."""
    pool = _processes()
    if pool is None or not jobs:
        return 0
    try:
        futures: list[Future] = [pool.submit(compile_kernel, source, filename, target, cache_dir, job) for job in jobs]
    except Exception as e:  # noqa: BLE001 - a broken pool: the threads compile everything
        log.info("Triton compile workers unavailable (%s: %s); compiling in threads", type(e).__name__, e)
        _discard()
        return 0
    done, _ = wait(futures, timeout=WAIT_S)
    compiled = 0
    for future, (name, _, _) in zip(futures, jobs):
        error = future.exception() if future in done else TimeoutError("still compiling")
        if error is None:
            compiled += 1
        else:
            log.debug("Triton compile worker: kernel %s left to the build's threads: %s: %s", name,
                      type(error).__name__, error)
    return compiled


def start() -> None:
    """Start the workers (importing torch and Triton takes each a few seconds), so that they are ready by the time
    the first build's kernels are printed."""
    _processes()


def _processes() -> ProcessPoolExecutor | None:
    global _pool
    with _lock:
        if _pool is None and workers() > 0:
            _pool = ProcessPoolExecutor(workers(), mp_context=multiprocessing.get_context("spawn"))
            for _ in range(workers()):
                _pool.submit(_ready)
        return _pool


def _ready() -> None:
    """In a worker, at its start: what compiling needs, imported."""
    import triton  # noqa: F401

    from . import _build  # noqa: F401 - ember-core and torch with it


def _discard() -> None:
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------------- in a worker

_modules: dict[str, ModuleType] = {}
_target: tuple | None = None


def compile_kernel(source: str, filename: str, target: tuple[str, Any, int], cache_dir: str, job: Job) -> None:
    """In a worker: compile one kernel of the module for `target` into `cache_dir`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    global _target
    if _target != target:  # once per worker: Triton's own driver would look for a GPU
        driver.set_active(_TargetOnly(GPUTarget(*target)))
        _target = target
    triton.knobs.cache.dir = cache_dir
    name, args, meta = job
    module = _module(source, filename)
    compiled = getattr(module, name).warmup(*args, grid=(1,), **meta)
    if hasattr(compiled, "result"):
        compiled.result()


class _TargetOnly:
    """A driver for compiling only: the parent's target, device 0, stream 0."""

    def __init__(self, target: Any):
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def _module(source: str, filename: str) -> ModuleType:
    key = hashlib.sha256(source.encode()).hexdigest()[:40]
    if key not in _modules:
        from ._build import load_module

        _modules[key] = load_module(f"ember_triton_worker_{key}", Path(filename), source.encode())
    return _modules[key]
