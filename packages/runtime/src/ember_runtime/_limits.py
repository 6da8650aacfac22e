"""What a machine can do at most, measured once per process and device: memory bandwidth (a large tensor copy)
and matmul throughput per dtype (a large torch.mm). Profiles state each kernel as a fraction of these."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from ember_core import to_dtype

COPY_BYTES = {"cpu": 1 << 27, "cuda": 1 << 30}  # bytes of the copied tensor: well past any cache
MM_SIZE = {"cpu": 1024, "cuda": 8192}  # n of the n x n matmul
REPEATS = 5


@dataclass
class Limits:
    """`bandwidth` in bytes/s (read + written by a copy); `flops(dtype)` in FLOP/s of an n x n mm, measured on first
    use of each dtype (0.0 for a dtype mm does not take there)."""

    device: str
    bandwidth: float
    _flops: dict[str, float] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def flops(self, dtype: str = "float32") -> float:
        with self._lock:
            if dtype not in self._flops:
                self._flops[dtype] = _measure_mm(self.device, dtype)
            return self._flops[dtype]

    def measured_flops(self) -> dict[str, float]:
        """The mm FLOP rates measured so far, by dtype."""
        with self._lock:
            return dict(self._flops)


_measured: dict[str, Limits] = {}
_lock = threading.Lock()


def machine_limits(device: str | torch.device = "cpu") -> Limits:
    """The limits of `device` (`cpu`, `cuda`, `cuda:1`), measured the first time this process asks."""
    d = torch.device(device)
    device = f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}" if d.type == "cuda" else d.type
    with _lock:
        if device not in _measured:
            _measured[device] = Limits(device, _measure_copy(device))
        return _measured[device]


def best_seconds(device: str, fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """The fastest of `repeats` timed calls of `fn`, after one untimed call (waiting for the device)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def _measure_copy(device: str) -> float:
    n = COPY_BYTES[torch.device(device).type] // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return 2 * src.nbytes / best_seconds(device, lambda: dst.copy_(src))


def _measure_mm(device: str, dtype: str) -> float:
    n = MM_SIZE[torch.device(device).type]
    try:
        a = torch.ones(n, n, device=device).to(to_dtype(dtype))
        return 2 * n**3 / best_seconds(device, lambda: torch.mm(a, a), repeats=3)
    except (RuntimeError, ValueError, TypeError):  # no mm of this dtype here (or no such dtype)
        return 0.0
