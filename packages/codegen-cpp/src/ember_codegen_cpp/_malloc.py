"""glibc's malloc thresholds, set once per process where glibc's own rule for them ends.

glibc serves a request above its mmap threshold with fresh pages of its own (`mmap`), and gives the heap's free top
back to the system once it passes the trim threshold. Both start at 128 KiB and rise each time the process frees a
large mmapped chunk (the trim threshold to twice the mmap one), up to 32 MiB and 64 MiB. So whether a compiled
call's buffers (its kernels' temps, and the results of the ATen calls it makes) fault every page in again on every
call depends on what the process happened to free before, and on how the call's frees leave the heap. On an Intel
Xeon at 2 threads, ember's vit_tiny inference faulted 1,400-1,700 pages a call (3-4 ms of system time on a call of
about 20) and convnext_atto's 1,900-4,400; training steps 870-7,300 (each number moved between two runs of one
program). With the thresholds at their ceiling, none of them faults more than a few hundred pages a call; only
buffers above 32 MiB (T5's 65 MB embedding gradient) still come fresh from the system. (The benchmarks fix the
thresholds for every variant through `MALLOC_*_` variables, `benchmarks/_harness.py`, so their tables never saw
this.)

`tune_malloc` sets them there (`mallopt`: mmap 32 MiB, trim 64 MiB) when the first CPU graph is compiled, and says so
in the log. The cost: up to 64 MiB of freed heap kept instead of returned, per malloc arena (the main one, and one
for each thread that allocated while another held it; ATen allocates a graph's buffers on the calling thread). It
leaves malloc alone where the process chose for itself (a `MALLOC_*_` variable, a `glibc.malloc` tunable, another
allocator preloaded), off glibc, and under the option `cpp.malloc='system'`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("ember.kernels")

OPTION = "cpp.malloc"
CHOICES = ("thresholds", "system")

# mallopt's parameters (malloc.h) and the values glibc's dynamic rule stops at on 64-bit systems
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
        "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST")
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")

_lock = threading.Lock()
_outcome: str | None = None  # what the first call did, for `malloc_tuning()`


def malloc_tuning() -> str | None:
    """What this process's first `tune_malloc` did (`set ...` or `left alone: <why>`), or None before it ran."""
    return _outcome


def chosen_elsewhere(env: Mapping[str, str]) -> str | None:
    """Why the process's malloc is not ember's to tune (the variable or library that says so), or None."""
    for name in _ENV:
        if name in env:
            return f"{name} is set"
    if "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets glibc.malloc"
    preload = env.get("LD_PRELOAD", "")
    for lib in _OTHER_ALLOCATORS:
        if lib in preload:
            return f"LD_PRELOAD loads {lib}"
    return None


def _glibc() -> Any | None:
    """The C library, if it is glibc (it has `gnu_get_libc_version` and `mallopt`)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def tune_malloc(options: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                libc: Any | None = None) -> str:
    """Set glibc's mmap and trim thresholds once per process (see the module's docstring); what was done."""
    global _outcome
    with _lock:
        if _outcome is None:
            why = _why_not(options or {}, os.environ if env is None else env, libc or _glibc())
            if why is None:
                _outcome = f"set glibc's malloc thresholds: mmap {MMAP_THRESHOLD >> 20} MiB, " \
                           f"trim {TRIM_THRESHOLD >> 20} MiB"
                log.info("%s (%s='system' leaves them)", _outcome, OPTION)
            else:
                _outcome = f"left glibc's malloc thresholds alone: {why}"
                log.debug(_outcome)
        return _outcome


def _why_not(options: Mapping[str, Any], env: Mapping[str, str], libc: Any | None) -> str | None:
    """Why the thresholds stay as they are, or None once they are set."""
    if options.get(OPTION, "thresholds") == "system":
        return f"{OPTION}='system'"
    why = chosen_elsewhere(env)
    if why is not None:
        return why
    if libc is None:
        return "the C library is not glibc"
    if libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "glibc refused the thresholds"
    return None
