"""Measuring a kernel's variants and keeping the fastest, on disk: what `mode="max-autotune"` shares between codegens.

Under a max-autotune mode a codegen gives each kernel several candidate variants (codegen-cpp: parallel threshold,
tile size, vector width; codegen-triton: block size and warps), each a tuple of integers. On the kernel's first
call it asks its `Tuner` to `choose` one:

- a choice stored on disk under the kernel's key (which the codegen makes from the variants' source, the device
  and the toolchain) is reused. It is a JSON list of integers that must be one of the kernel's candidates; an
  entry that is anything else is ignored and the kernel measured again (parsed, never evaluated; ember-core's
  `DiskCache` has already checked the file's hash, owner and mode);
- otherwise every candidate runs on the call's own arguments, the best of `repeats` launches is its time, and the
  fastest is stored (a candidate twice as slow as the best so far is launched once, a long kernel twice; a tuner
  made to `interleave` runs `repeats` rounds that launch every candidate once each, three once they have taken
  `LONG` seconds a candidate, and takes each one's median instead: a call that is fast only now and then is not its
  typical time). The
  first candidate is the heuristics' choice, and another must beat it by `margin` (3%) to be kept: a difference
  inside the noise of a few launches is no reason to leave the heuristics. The buffers the kernel writes are saved
  first and put back after every launch, so a kernel that updates a buffer in place (an optimizer step) leaves it
  as one run would.

A measured choice is sent as a `kernel_tuned` event (shown by `EMBER_LOGS=autotune`) with every candidate's time.
Which mode tunes is the codegen's business, read from its options (`tuning_mode`); the runtime knows nothing of it.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from ember_core import DiskCache, Event, emit

TUNED_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
Choice = tuple[int, ...]
LONG = 0.02  # seconds of launches after which a candidate's time is known well enough (from its second launch on)


def tuning_mode(options: Mapping[str, Any] | None) -> bool:
    """Does this compile's `mode` ask codegens to measure their kernels' variants?"""
    return (options or {}).get("mode") in TUNED_MODES


def sync(tensors: Sequence[Any]) -> None:
    """Wait for every accelerator any of `tensors` is on (launches there return before the kernel ends); a host
    tensor's work is done when its call returns."""
    for device in {t.device for t in tensors if isinstance(t, torch.Tensor) and t.device != _HOST}:
        torch.accelerator.synchronize(device)


_HOST = torch.device("cpu")


class Tuner:
    """Choices of one codegen (`stage`), kept in ember-core's verified disk cache `cache` (or one of that name,
    whose files are `<key>.choice`)."""

    def __init__(self, cache: DiskCache | str, stage: str, repeats: int = 3, margin: float = 0.03,
                 machine: tuple[str, ...] = ("cpu",), interleave: bool = False):
        """`machine`: what the timings depend on, for a remote cache or an artifact (`ember_core.caches`).
        `interleave`: each of `repeats` rounds launches every candidate once, so that a load that comes and goes
        (a compiler building the graph's kernels beside the measurement) weighs on all of them alike, and a
        candidate's time is its median; no candidate stops early."""
        self.cache = cache if isinstance(cache, DiskCache) else DiskCache(cache, ("choice",), machine=machine)
        self.stage, self.repeats, self.margin, self.interleave = stage, repeats, margin, interleave

    def choose(self, key: str, kernel: str, candidates: Sequence[Choice], launch: Callable[[Choice], None],
               written: Sequence[torch.Tensor], args: Sequence[Any] = ()) -> Choice:
        """The stored choice of `key`, else the fastest of `candidates` run through `launch(choice)`; `written`
        are the tensors a launch stores to (restored after each), `args` what to synchronize on."""
        stored = self.stored(key, candidates)
        return stored if stored is not None else self.measure(key, kernel, candidates, launch, written, args)

    def measure(self, key: str, kernel: str, candidates: Sequence[Choice], launch: Callable[[Choice], None],
                written: Sequence[torch.Tensor], args: Sequence[Any] = ()) -> Choice:
        """`choose` without looking on disk first: every candidate timed, the fastest stored and returned."""
        saved = [t.clone() for t in written]
        times: dict[Choice, float] = {}
        if self.interleave:
            rounds: dict[Choice, list[float]] = {c: [] for c in candidates}
            for k in range(self.repeats):
                for c in candidates:
                    rounds[c].append(self._time(launch, c, written, saved, [*args, *written], 0, repeats=1))
                if k >= 2 and sum(map(sum, rounds.values())) > LONG * len(candidates):
                    break  # long launches: three rounds are enough
            times = {c: statistics.median(t) for c, t in rounds.items()}
        else:
            for c in candidates:  # a candidate 2x slower than the best so far stops after its first launch
                times[c] = self._time(launch, c, written, saved, [*args, *written],
                                      2 * min(times.values(), default=1e9))
        best = min(times, key=times.__getitem__)
        if times[best] > times[candidates[0]] * (1 - self.margin):
            best = candidates[0]
        self.store(key, best, kernel)
        message = (f"{kernel}: variant {list(best)} of {len(candidates)} "
                   f"({times[best] * 1e6:.1f} us; first candidate {times[candidates[0]] * 1e6:.1f} us)")
        emit(Event(kind="kernel_tuned", stage=self.stage, message=message,
                   data={"kernel": kernel, "key": key, "choice": list(best),
                         "candidates": [list(c) for c in candidates],
                         "seconds": [times[c] for c in candidates]}))
        return best

    def _time(self, launch: Callable[[Choice], None], choice: Choice, written: Sequence[torch.Tensor],
              saved: Sequence[torch.Tensor], args: Sequence[Any], give_up: float, repeats: int = 0) -> float:
        """The best of `repeats` launches (the tuner's by default); of fewer once one takes longer than `give_up`
        seconds, or once two or more have taken `LONG` seconds together (a long kernel's launches vary little)."""
        best, spent = float("inf"), 0.0
        for k in range(repeats or self.repeats):
            sync(args)
            start = time.perf_counter()
            launch(choice)
            sync(args)
            took = time.perf_counter() - start
            best, spent = min(best, took), spent + took
            for t, copy in zip(written, saved):
                t.copy_(copy)
            if best > give_up or (k >= 1 and spent > LONG):
                break
        return best

    def stored(self, key: str, candidates: Sequence[Choice]) -> Choice | None:
        """The choice stored for `key` if it is one of `candidates`; None for no entry or one that is not."""
        found = self.cache.lookup(key)
        if not found.hit:
            return None
        try:
            data = json.loads(found.data["choice"])
        except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past recursion
            return None
        if not isinstance(data, list) or not all(type(v) is int for v in data):
            return None
        choice = tuple(data)
        return choice if choice in set(map(tuple, candidates)) else None

    def store(self, key: str, choice: Choice, kernel: str) -> None:
        try:
            with self.cache.lock(key):
                self.cache.store(key, {"choice": json.dumps(list(choice)).encode()}, {"kernel": kernel})
        except OSError:
            pass  # an unwritable cache costs a new measurement in the next process, nothing else
