"""A program's Triton module through ember-core's verified disk cache: the generated source is stored as
`<key>.py` (the key hashes the source, Triton's version and `FORMAT`) and imported from there, so that Triton's
JIT reads the kernels' source from a real file and tracebacks show it. Triton itself compiles each kernel for the
device on its first launch, with its own cache."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import triton
from ember_core import DiskCache
from ember_lowering.codegen import Build, BuildError, BuildPool

FORMAT = "1"  # bump when the meaning of generated code changes without its text changing
CACHE = DiskCache("triton", ("py",))
_POOL = BuildPool(CACHE, "triton")


def module_build(source: str) -> Build:
    """A Build whose future resolves to the entry's files (`py`)."""
    key = hashlib.sha256("\0".join([FORMAT, triton.__version__, source]).encode()).hexdigest()[:40]
    expect = {"source_sha256": hashlib.sha256(source.encode()).hexdigest()}
    return _POOL.get(key, expect, lambda work: ({"py": source.encode()}, {"triton": triton.__version__}))


def import_module(key: str, path: Path) -> ModuleType:
    """The module of a verified entry (once per process and key)."""
    name = f"ember_triton_{key}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot import the Triton module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # ember's own generated source, verified against its sidecar
    except Exception as e:
        del sys.modules[name]
        raise BuildError(f"the Triton module {path} failed to load: {type(e).__name__}: {e}") from e
    return module
