"""Building a translation unit into a shared library with the system compiler.

`Builder.library(source)` gives a `Build` of the shared layer's `BuildPool`: a verified cached library, or a
future of one that a worker thread is compiling (`g++` runs as a subprocess, so builds of several graphs overlap
on several cores). What is C++ here: the compiler, its flags, and the cache key, which hashes the source, the
flags, the compiler's version and the CPU (because of `-march=native`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path

from ember_lowering.codegen import Build, BuildError, BuildPool

from ._cache import CACHE

# -O3: -O2 builds only ~10% faster (0.61 s vs 0.70 s for a 1900-line training graph) and vectorizes less.
# No -ffast-math: results must match torch's, NaN and inf included. -fno-math-errno lets sqrt and libm calls
# vectorize, -fno-trapping-math lets masked code if-convert; neither changes a result. -ffp-contract=off: gcc would
# otherwise fuse a*b+c into one fma (one rounding instead of two), a result eager's kernels do not give (atanh's
# gradient 1/(1-x*x) near |x|=1 was 2 ulps off).
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
                          "-ffp-contract=off", "-fno-semantic-interposition", "-fvisibility=hidden", "-std=c++17",
                          "-shared", "-fPIC", "-w")
FORMAT = "1"  # bump when the meaning of generated code changes without its text changing


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
def _cpu_lines() -> str:
    """The first CPU's model name and feature flags from /proc/cpuinfo ("" where there is none)."""
    text = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    text += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    return text


@cache
def cpu_tag() -> str:
    """What -march=native depends on: the CPU model and its feature flags."""
    return hashlib.sha256((platform.machine() + _cpu_lines()).encode()).hexdigest()[:16]


def wide_vectors() -> bool:
    """Does this CPU have vectors wider than 256 bits (AVX-512), so that preferring 256 is a variant worth trying?"""
    return any(line.startswith("flags") and " avx512f" in line for line in _cpu_lines().splitlines())


@cache
def vector_lanes() -> tuple[int, ...]:
    """The float32 lane counts kernels' explicit vectors may have, the native one first: 16 and 8 on an AVX-512 CPU
    (a max-autotune variant keeps to 256-bit registers), 8 on AVX2, else 4 (SSE, NEON)."""
    flags = next((line.split() for line in _cpu_lines().splitlines() if line.startswith("flags")), [])
    if "avx512f" in flags:
        return (16, 8)
    return (8,) if "avx2" in flags else (4,)


def build_key(source: str, flags: tuple[str, ...], cxx: str) -> str:
    parts = [FORMAT, source, " ".join(flags), compiler_version(cxx), cpu_tag()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def run_compiler(cxx: str, flags: tuple[str, ...], source: str, work: Path) -> Path:
    """Compile source into `work`/ember.so (work is a folder of this build's own); BuildError with the compiler's
    output."""
    src, out = work / "ember.cpp", work / "ember.so"
    src.write_text(source)
    cmd = [cxx, *flags, str(src), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"{shlex.join(cmd)} could not run: {e}") from e
    if proc.returncode != 0 or not out.exists():
        raise BuildError(f"{shlex.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return out


class Builder:
    """Builds through the cache in the shared pool; concurrent requests of one key share a build."""

    def __init__(self, flags: tuple[str, ...] = FLAGS, cxx: str | None = None):
        self.flags = tuple(flags)
        self._cxx = cxx
        self.pool = BuildPool(CACHE, "cpp", what="C++ library")

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
