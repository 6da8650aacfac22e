"""`mode="max-autotune"`: each kernel's block size and warps chosen by measurement, once per kernel and device.

On its first launch a `TunedKernel` asks the shared `Tuner` (ember_lowering.codegen): a choice stored on disk
(cache `triton_tune`, keyed by the kernel's source, the device's name, the configurations tried and Triton's
version) is reused, else every configuration runs on the call's own arguments and the fastest is kept. A
configuration is `(XBLOCK, num_warps)`.

A matmul template (`_gemm.py`) is chosen the same way by its `TunedGemm`, against the extern call and the kernel
it would replace: `(0, 0, 0, 0, 0)` stands for those two, every other choice is a tile configuration
`(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
from ember_lowering.codegen import Tuner

from ._caches import TUNING
from ._gemm import GemmTemplate
from ._kernel_printer import ROW_ELEMENTS, TritonKernel
from ._wrapper import launch_debug

TUNER = Tuner(TUNING, "codegen-triton")
Config = tuple[int, int]  # (XBLOCK, num_warps)


def configs(k: TritonKernel) -> list[Config]:
    """What to try: the heuristic's choice first, then other block sizes and warp counts."""
    if k.rblock:
        xblocks = [x for x in (1, 4, 16, 64) if x * k.rblock <= 4 * ROW_ELEMENTS] or [1]
    else:
        xblocks = [256, 512, 1024, 2048]
    tried = [(k.xblock, k.warps)] + [(x, w) for x in xblocks for w in (4, 8)]
    return list(dict.fromkeys(tried))


def device_name(t: torch.Tensor) -> str:
    if t.device.type == "cuda":
        return torch.cuda.get_device_name(t.device)
    return f"{t.device.type} (interpreter)"


class TunedKernel:
    """`tuned(n, *args)`: launch kernel `name` of `env` over `n` points with the best configuration. With `lean`
    (on CUDA: a configuration → its lean launcher, `_launcher.py`), launches after the choice go through the chosen
    configuration's lean launcher, on the stream `env["_lean_stream"]()` reads."""

    def __init__(self, env: dict[str, Any], k: TritonKernel, written: Sequence[int], debug: bool = False,
                 lean: Callable[[Config], Callable] | None = None, tried: int | None = None):
        """`tried`: how many of the configurations to try (None: all)."""
        self.env, self.k, self.written = env, k, tuple(written)  # written: positions of the roots it stores to
        self.debug = debug
        self.configs = configs(k)[:tried]
        self.choice: Config | None = None
        self.lean, self.launcher = lean, None
        self._lock = threading.Lock()

    def __call__(self, n: int, *args: Any) -> None:
        if self.choice is None:
            with self._lock:
                if self.choice is None:
                    choice = self._choose(n, args)
                    self.launcher = self.lean(choice) if self.lean else None
                    self.choice = choice
        if self.launcher is not None:
            self.launcher(triton.cdiv(n, self.choice[0]), self.env["_lean_stream"](), *args)
            return
        self._launch(self.choice, n, args)

    def _launch(self, config: Config, n: int, args: Sequence[Any]) -> None:
        xblock, warps = config
        meta = {"XBLOCK": xblock, "num_warps": warps, **({"RBLOCK": self.k.rblock} if self.k.rblock else {}),
                **({"debug": True} if self.debug else {})}
        self.env[self.k.name][(triton.cdiv(n, xblock),)](*args, **meta)

    def key(self, args: Sequence[Any]) -> str:
        device = next((device_name(a) for a in args if isinstance(a, torch.Tensor)), "unknown")
        text = "\0".join([self.k.text, device, repr(self.configs), triton.__version__])
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def _choose(self, n: int, args: Sequence[Any]) -> Config:
        choice = TUNER.choose(self.key(args), self.k.name, self.configs, lambda c: self._launch(c, n, args),
                              [args[i] for i in self.written], args)
        return choice  # type: ignore[return-value] - one of self.configs


def tuned_kernels(program_kernels: Sequence[TritonKernel], env: dict[str, Any], debug: bool = False,
                  sync: bool = True, lean: Callable[[TritonKernel], Callable] | None = None,
                  tried: int | None = None) -> dict[str, Callable]:
    """`_tune_<name>` → its `TunedKernel`, for a wrapper's globals (a matmul template's `TunedGemm` is
    `_gemm_<name>`); `lean(kernel)`: the kernel printed with a configuration → its lean launcher, on CUDA;
    `tried`: how many configurations each kernel tries (None: all)."""
    out = {}
    for k in program_kernels:
        written = [j for j, r in enumerate(k.roots) if r in k.writes]
        chosen = (lambda c, k=k: lean(dataclasses.replace(k, xblock=c[0], warps=c[1]))) if lean else None
        out[f"_tune_{k.name}"] = TunedKernel(env, k, written, launch_debug(k, debug, sync), chosen, tried)
    return out


UNFUSED = (0, 0, 0, 0, 0)  # a TunedGemm's choice of the extern call and the kernel after it


class TunedGemm:
    """`gemm((batch, m, n), extern_args, *args) -> bool`: run template `t` with `args` (its roots, then the plan's
    symbols) and say True, or say False where the extern call and its epilogue kernel are faster (the wrapper then
    runs those). `extern(*extern_args)` is the extern call; the epilogue launches through `_tune_<epilogue>`."""

    def __init__(self, env: dict[str, Any], t: GemmTemplate, epilogue: TritonKernel, extern: Callable,
                 measure: bool = True, lean: Callable[[tuple[int, ...]], Callable] | None = None,
                 tried: int | None = None):
        """`lean` (on CUDA): a configuration → the template's lean launcher in it (`launch(tiles, batch, stream,
        *args)`), which launches after the choice; `tried`: how many tile configurations to try (None: all)."""
        self.env, self.t, self.epilogue, self.extern = env, t, epilogue, extern
        self.candidates: list[tuple[int, ...]] = ([UNFUSED] if measure else []) + list(t.configs[:tried])
        self.written = [j for j, r in enumerate(t.roots) if r in t.writes]
        self.choice: tuple[int, ...] | None = None
        self.lean, self.launcher = lean, None
        self._lock = threading.Lock()

    def __call__(self, sizes: tuple[int, int, int], extern_args: Sequence[Any], *args: Any) -> bool:
        if sizes[0] * sizes[1] * sizes[2] == 0:
            return False  # nothing to compute: the extern call makes its empty result, the kernel launches nothing
        if self.choice is None:
            with self._lock:
                if self.choice is None:
                    choice = self._choose(sizes, extern_args, args)
                    self.launcher = self.lean(choice) if self.lean and choice != UNFUSED else None
                    self.choice = choice
        if self.choice == UNFUSED:
            return False
        if self.launcher is not None:
            batch, m, n = sizes
            bm, bn = self.choice[:2]
            self.launcher(triton.cdiv(m, bm) * triton.cdiv(n, bn), batch, self.env["_lean_stream"](), *args)
            return True
        self._launch(self.choice, sizes, args)
        return True

    def _launch(self, config: tuple[int, ...], sizes: tuple[int, int, int], args: Sequence[Any]) -> None:
        bm, bn, bk, warps, stages = config
        batch, m, n = sizes
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), batch)
        self.env[self.t.name][grid](*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)

    def _unfused(self, sizes: tuple[int, int, int], extern_args: Sequence[Any], args: Sequence[Any]) -> None:
        """The extern call and the epilogue kernel, as the wrapper runs them."""
        product = self.extern(*extern_args)
        given = dict(zip(self.t.roots, args))
        tail = args[len(self.t.roots):]  # the plan's symbols
        batch, m, n = sizes
        roots = [product if r == self.t.product else given[r] for r in self.epilogue.roots]
        self.env[f"_tune_{self.epilogue.name}"](batch * m * n, *roots, *tail)

    def key(self, args: Sequence[Any]) -> str:
        device = next((device_name(a) for a in args if isinstance(a, torch.Tensor)), "unknown")
        text = "\0".join([self.t.text, self.epilogue.text, device, repr(self.candidates), triton.__version__])
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def _choose(self, sizes, extern_args, args) -> tuple[int, ...]:
        def launch(c: tuple[int, ...]) -> None:
            if c == UNFUSED:
                self._unfused(sizes, extern_args, args)
            else:
                self._launch(c, sizes, args)

        if len(self.candidates) == 1:
            return self.candidates[0]
        return TUNER.choose(self.key(args), self.t.name, self.candidates, launch, [args[i] for i in self.written],
                            args)
