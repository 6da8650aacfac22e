"""Building a translation unit into a shared library with the system compiler.

`Builder.library(source)` gives a `Build` of the shared layer's `BuildPool`: a verified cached library, or a
future of one that a worker thread is compiling (`g++` runs as a subprocess, so builds of several graphs overlap
on several cores). What is C++ here: the compiler, its flags, and the cache key, which hashes the source, the
flags, the compiler's version and the CPU (because of `-march=native`).

A big program comes in several units (`_program.translation_units`), one per part, so that one graph's build
uses several cores: `Builder.libraries(sources)` gives a `LibrariesBuild` whose parts are ordinary builds of the
pool, each its own cache entry (verified, rebuilt when corrupt, shared by any graph with the same part), and
whose future resolves once every part is built. Several libraries rather than object files linked into one: no
link step waiting on the parts (which, run in a pool worker, could wait on parts queued behind it), and nothing
new in the cache. The split only pays for units of several `PART_LINES`: each part costs a g++ start, a parse of the
prelude and a link (0.04 s of CPU, about 60 kernel lines at 0.7 ms a line). A GPT-like training step's backward
(2800 kernel lines, 2.21 s of g++) builds in two parts of 1.15 and 1.06 s.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ember_core import cpu_lines, cpu_tag
from ember_lowering.codegen import Build, BuildError, BuildPool

from ._cache import CACHE
from ._sleef import link_flags

# -O3: -O2 builds only ~10% faster (0.61 s vs 0.70 s for a 1900-line training graph) and vectorizes less.
# No -ffast-math: results must match torch's, NaN and inf included. -fno-math-errno lets sqrt and libm calls
# vectorize, -fno-trapping-math lets masked code if-convert (where it may: see GCC_FLAGS); neither changes a result.
# -ffp-contract=off: gcc would otherwise fuse a*b+c into one fma (one rounding instead of two), a result eager's
# kernels do not give (atanh's gradient 1/(1-x*x) near |x|=1 was 2 ulps off).
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
                          "-ffp-contract=off", "-fno-semantic-interposition", "-fvisibility=hidden", "-std=c++17",
                          "-shared", "-fPIC", "-w")
# gcc only: -fno-tree-loop-if-convert. gcc 12.2's vectorizer miscompiles the masked loads that loop if-conversion
# makes: in a loop it vectorizes with several vectors a step (a kernel's outer loop with a short inner one unrolled
# into it), every masked load of a group reads under the first vector's mask. `slice_scatter(x, y, 0, 6, 8)
# .bfloat16()` wrote 0 in the scattered rows, silently (-O3 -mavx2: -march=native on an AVX2 machine). Without
# if-conversion gcc makes no masked loads at all. The hot loops are explicit vectors (`_vector.py`) and keep their
# speed; what gcc vectorized by if-converting slows down: the lane-by-lane argmax/argmin update (about 1.8x on one
# AVX2 core) and gathers (1.1x).
GCC_FLAGS: tuple[str, ...] = ("-fno-tree-loop-if-convert",)
FORMAT = "1"  # bump when the meaning of generated code changes without its text changing
PART_LINES = 500  # fewest kernel lines per part of a split unit (0.35 s of g++): a part's fixed cost is then ~10%


@cache
def compiler() -> str | None:
    """The C++ compiler: $CXX, else g++, c++ or clang++ on PATH."""
    env = os.environ.get("CXX")
    if env:
        return shlex.split(env)[0]
    return next((p for p in map(shutil.which, ("g++", "c++", "clang++")) if p), None)


@cache
def compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


@cache
def is_gcc(cxx: str) -> bool:
    """Is `cxx` gcc (g++, or c++ where that is g++)? Its `--version` names the Free Software Foundation."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in out.stdout and "clang" not in out.stdout.lower()


def wide_vectors() -> bool:
    """Does this CPU have vectors wider than 256 bits (AVX-512), so that preferring 256 is a variant worth trying?"""
    return 16 in vector_lanes()


@cache
def vector_lanes() -> tuple[int, ...]:
    """The float32 lane counts kernels' explicit vectors may have, the native one first: 16 and 8 on an AVX-512 CPU
    (a max-autotune variant keeps to 256-bit registers), 8 on AVX2, else 4 (SSE, NEON)."""
    flags = next((line.split() for line in cpu_lines().splitlines() if line.startswith("flags")), [])
    if "avx512f" in flags:
        return (16, 8)
    return (8,) if "avx2" in flags else (4,)


def machine_flags(cxx: str) -> tuple[str, ...]:
    """What the builder adds to its flags for this CPU and compiler: the vector width to prefer, and `GCC_FLAGS`. A
    tool or benchmark that compiles the prelude into a program of its own passes `FLAGS` and these, to get the code
    kernels get.

    The kernels' explicit vectors have the CPU's native width (`vector_lanes`), and so must what the compiler makes
    of the vector layer's lane loops (fma, rint, sqrt, floor: `_vector_prelude.py`), which become one instruction
    each only through gcc's SLP vectorizer, at the width the tuning prefers: 256 bits for gcc's Intel tunings
    (-march=native on a Xeon reporting family 6 model 167 tunes for rocketlake), 128 for znver1. On that Xeon every
    fma of ember's 16-lane exp ran lane by lane and each rint in two halves stored and reloaded whole: a 4M-element
    bf16 sigmoid chain took 14.9 ms at one thread, 2.5 preferring 512 bits. Max-autotune's 256-bit variant
    (`Variant.vector_bits`) asks for its width on its kernel."""
    lanes = vector_lanes()[0]  # 16 or 8 lanes: x86 (AVX-512, AVX2), whose compilers take the flag
    prefer = (f"-mprefer-vector-width={32 * lanes}",) if lanes >= 8 else ()
    return prefer + (GCC_FLAGS if is_gcc(cxx) else ())


def build_key(source: str, flags: tuple[str, ...], cxx: str) -> str:
    parts = [FORMAT, source, " ".join(flags), compiler_version(cxx), cpu_tag()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def run_compiler(cxx: str, flags: tuple[str, ...], source: str, work: Path) -> Path:
    """Compile source into `work`/ember.so (work is a folder of this build's own); BuildError with the compiler's
    output."""
    src, out = work / "ember.cpp", work / "ember.so"
    src.write_text(source)
    cmd = [cxx, *flags, str(src), "-o", str(out), *link_flags(source)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"{shlex.join(cmd)} could not run: {e}") from e
    if proc.returncode != 0 or not out.exists():
        raise BuildError(f"{shlex.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return out


@dataclass
class LibrariesBuild(Build):
    """The build of a unit split in parts: a hit when every part is; the future resolves to each part's verified
    entry, in order, or raises the first part's error. `key` hashes the parts' keys."""

    parts: tuple[Build, ...] = ()

    @classmethod
    def joined(cls, parts: Sequence[Build]) -> LibrariesBuild:
        future: Future = Future()
        left = [len(parts)]
        lock = threading.Lock()

        def done(_: Future) -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            try:
                future.set_result([p.future.result() for p in parts])
            except Exception as e:  # noqa: BLE001 - BuildError, or a cancelled part: the whole build failed
                future.set_exception(e if isinstance(e, BuildError) else BuildError(f"a part's build failed: {e!r}"))

        key = hashlib.sha256("\0".join(p.key for p in parts).encode()).hexdigest()[:40]
        missed = [p for p in parts if not p.hit]
        reason = f"{len(missed)} of {len(parts)} parts: {missed[0].reason}" if missed else ""
        build = cls(key, future, not missed, reason, parts=tuple(parts))
        for p in parts:
            p.future.add_done_callback(done)
        return build

    def rebuild(self, reason: str) -> Build | None:
        """Every part built again (which of them failed to bind is not known)."""
        parts = [p.rebuild(reason) for p in self.parts]
        return None if None in parts else LibrariesBuild.joined(parts)


class Builder:
    """Builds through the cache in the shared pool; concurrent requests of one key share a build. A unit of
    `part_lines` lines or more is split in up to one part per pool worker (`parts`)."""

    def __init__(self, flags: tuple[str, ...] = FLAGS, cxx: str | None = None, part_lines: int = PART_LINES,
                 workers: int | None = None):
        self._cxx = cxx
        self.flags = tuple(flags) + (machine_flags(self.cxx) if self.cxx else ())
        self.part_lines = part_lines
        self.pool = BuildPool(CACHE, "cpp", workers, what="C++ library")  # default: a worker per core

    def parts(self, lines: int) -> int:
        """How many parts a unit of `lines` kernel lines builds in: at least `part_lines` each, one per worker."""
        return max(1, min(self.pool.workers, lines // self.part_lines))

    def libraries(self, sources: Sequence[str]) -> Build:
        """One library per source, built in parallel: `library(source)` for one, else a `LibrariesBuild`."""
        builds = [self.library(s) for s in sources]
        return builds[0] if len(builds) == 1 else LibrariesBuild.joined(builds)

    @property
    def cxx(self) -> str | None:
        return self._cxx or compiler()

    def library(self, source: str) -> Build:
        """A Build whose future resolves to the cache entry's files: `so` (the library) and `cpp`."""
        cxx = self.cxx
        if cxx is None:
            return Build.failed(BuildError("no C++ compiler found (set CXX, or install g++)"), "no compiler")
        expect = {"source_sha256": hashlib.sha256(source.encode()).hexdigest()}

        def make(work: Path) -> tuple[dict, dict]:
            built = run_compiler(cxx, self.flags, source, work)
            return {"so": built, "cpp": source.encode()}, {"flags": list(self.flags), "compiler": compiler_version(cxx)}

        return self.pool.get(build_key(source, self.flags, cxx), expect, make)
