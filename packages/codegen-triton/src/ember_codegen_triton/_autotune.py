"""`mode="max-autotune"`: each kernel's block size and warps chosen by measurement, once per kernel and device.

On its first launch a `TunedKernel` looks up its choice in ember-core's verified disk cache (`triton_tune`, keyed
by the kernel's source, the device's name and the configurations tried). Without one it runs every configuration
on the call's own arguments, keeps the fastest and stores it; the buffers the kernel writes are saved first and put
back after each trial, so a kernel that updates a buffer in place runs exactly once on it. A stored choice is
parsed, never evaluated: two integers that must be among this kernel's configurations, else the entry is ignored
and the kernel tuned again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import triton
from ember_core import DiskCache

from ._kernel_printer import ROW_ELEMENTS, TritonKernel
from ._wrapper import launch_debug

CACHE = DiskCache("triton_tune", ("choice",))  # a small JSON object per kernel and device
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
        key = self.key(args)
        stored = self._stored(key)
        if stored is not None:
            return stored
        saved = [args[i].clone() for i in self.written]
        times = {c: self._time(c, n, args, saved) for c in self.configs}
        best = min(times, key=times.get)
        self._store(key, best)
        return best

    def _time(self, config: Config, n: int, args: Sequence[Any], saved: list[torch.Tensor]) -> float:
        """Seconds of one launch (the best of three), the written buffers restored after each."""
        best = float("inf")
        for _ in range(3):
            _sync(args)
            start = time.perf_counter()
            self._launch(config, n, args)
            _sync(args)
            best = min(best, time.perf_counter() - start)
            for i, copy in zip(self.written, saved):
                args[i].copy_(copy)
        return best

    def _stored(self, key: str) -> Config | None:
        found = CACHE.lookup(key)
        if not found.hit:
            return None
        try:
            data = json.loads(Path(found.files["choice"]).read_text())
            config = (data["xblock"], data["warps"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        ok = all(type(v) is int for v in config) and config in self.configs
        return config if ok else None  # anything else is not a choice this kernel could have made: tune again

    def _store(self, key: str, config: Config) -> None:
        text = json.dumps({"xblock": config[0], "warps": config[1]}).encode()
        try:
            with CACHE.lock(key):
                CACHE.store(key, {"choice": text}, {"kernel": self.k.name})
        except OSError:
            pass  # an unwritable cache costs a re-tune in the next process, nothing else


def _sync(args: Sequence[Any]) -> None:
    if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
        torch.cuda.synchronize()


def tuned_kernels(program_kernels: Sequence[TritonKernel], env: dict[str, Any], debug: bool = False,
                  sync: bool = True) -> dict[str, Callable]:
    """`_tune_<name>` → its `TunedKernel`, for a wrapper's globals."""
    out = {}
    for k in program_kernels:
        written = [j for j, r in enumerate(k.roots) if r in k.writes]
        out[f"_tune_{k.name}"] = TunedKernel(env, k, written, launch_debug(k, debug, sync))
    return out
