"""`mode="max-autotune"`: each kernel's block size and warps chosen by measurement, once per kernel and device.

On its first launch a `TunedKernel` asks the shared `Tuner` (ember_lowering.codegen): a choice stored on disk
(cache `triton_tune`, keyed by the kernel's source, the device's name, the configurations tried and Triton's
version) is reused, else every configuration runs on the call's own arguments and the fastest is kept. A
configuration is `(XBLOCK, num_warps)`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
from ember_lowering.codegen import Tuner

from ._caches import TUNING
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
    """`tuned(n, *args)`: launch kernel `name` of `env` over `n` points with the best configuration."""

    def __init__(self, env: dict[str, Any], k: TritonKernel, written: Sequence[int], debug: bool = False):
        self.env, self.k, self.written = env, k, tuple(written)  # written: positions of the roots it stores to
        self.debug = debug
        self.configs = configs(k)
        self.choice: Config | None = None
        self._lock = threading.Lock()

    def __call__(self, n: int, *args: Any) -> None:
        if self.choice is None:
            with self._lock:
                if self.choice is None:
                    self.choice = self._choose(n, args)
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
                  sync: bool = True) -> dict[str, Callable]:
    """`_tune_<name>` → its `TunedKernel`, for a wrapper's globals."""
    out = {}
    for k in program_kernels:
        written = [j for j, r in enumerate(k.roots) if r in k.writes]
        out[f"_tune_{k.name}"] = TunedKernel(env, k, written, launch_debug(k, debug, sync))
    return out
