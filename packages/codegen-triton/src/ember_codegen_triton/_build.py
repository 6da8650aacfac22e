"""A program's Triton module through ember-core's verified disk cache: the generated source is stored as
`<key>.py` (the key hashes the source, Triton's version, `FORMAT` and the check's flavor) and imported from
there, so that Triton's JIT reads the kernels' source from a real file and tracebacks show it. On a GPU the build
also compiles every kernel before the entry is stored (`check`, see `_precompile.py`): an entry exists only for a
module whose kernels all compiled."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import triton
from ember_core import DiskCache
from ember_lowering.codegen import Build, BuildError, BuildPool

FORMAT = "1"  # bump when the meaning of generated code changes without its text changing
CACHE = DiskCache("triton", ("py",))
_POOL = BuildPool(CACHE, "triton", what="Triton module")


def module_build(source: str, check: Callable[[ModuleType], None] | None = None, flavor: str = "") -> Build:
    """A Build whose future resolves to the entry's files (`py`); `check(module)` runs on the module imported from
    the work folder before the entry is stored, and raises BuildError to fail the build. `flavor` names what the
    check did (the GPU compiled for, debug or not): part of the key, so that another one checks again."""
    key = hashlib.sha256("\0".join([FORMAT, triton.__version__, flavor, source]).encode()).hexdigest()[:40]
    expect = {"source_sha256": hashlib.sha256(source.encode()).hexdigest()}

    def make(work: Path):
        if check is not None:
            path = work / f"{key}.py"
            path.write_text(source)
            check(_load(f"ember_triton_check_{key}", path))
        return {"py": source.encode()}, {"triton": triton.__version__}

    return _POOL.get(key, expect, make)


def import_module(key: str, path: Path) -> ModuleType:
    """The module of a verified entry (once per process and key)."""
    name = f"ember_triton_{key}"
    if name not in sys.modules:
        sys.modules[name] = _load(name, path)
    return sys.modules[name]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot import the Triton module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # while it runs: Triton's JIT looks its module up to read the kernels' source
    try:
        spec.loader.exec_module(module)  # ember's own generated source, verified against its sidecar
    except Exception as e:
        raise BuildError(f"the Triton module {path} failed to load: {type(e).__name__}: {e}") from e
    finally:
        del sys.modules[name]
    return module
