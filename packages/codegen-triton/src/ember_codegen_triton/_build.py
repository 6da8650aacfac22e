"""A program's Triton module through ember-core's verified disk cache: the generated source is stored as
`<key>.py` (the key hashes the source, Triton's version, `FORMAT` and the check's flavor). The module is run from
the bytes the cache verified, never read again from the cache directory: they are also what `linecache` serves
for its file name, so that Triton's JIT reads the kernels' source from them and tracebacks show it. On a GPU the
build also compiles every kernel before the entry is stored (`check`, see `_precompile.py`): an entry exists only
for a module whose kernels all compiled."""

from __future__ import annotations

import hashlib
import linecache
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import triton
from ember_core import CacheLookup
from ember_lowering.codegen import Build, BuildError, BuildPool

from ._caches import MODULES

FORMAT = "4"  # bump when the meaning of generated code or of the entry changes without the source changing
CACHE = MODULES  # the module (code: it runs); the manifest of its compiled kernels (`_binaries.py`), for this GPU
_POOL = BuildPool(CACHE, "triton", what="Triton module")


def module_build(source: str, check: Callable[[ModuleType], bytes | None] | None = None, flavor: str = "") -> Build:
    """A Build whose future resolves to the entry's files (`py`, and `bins`: what `check` returned, or nothing);
    `check(module)` runs on the module imported from the work folder before the entry is stored, and raises
    BuildError to fail the build. `flavor` names what the check did (the GPU compiled for, debug or not): part of
    the key, so that another one checks again."""
    key = hashlib.sha256("\0".join([FORMAT, triton.__version__, flavor, source]).encode()).hexdigest()[:40]
    expect = {"source_sha256": hashlib.sha256(source.encode()).hexdigest()}

    def make(work: Path):
        bins = None
        if check is not None:
            bins = check(load_module(f"ember_triton_check_{key}", work / f"{key}.py", source.encode()))
        return {"py": source.encode(), "bins": bins or b""}, {"triton": triton.__version__}

    return _POOL.get(key, expect, make)


def import_module(key: str, found: CacheLookup) -> ModuleType:
    """The module of a verified entry (once per process and key)."""
    name = f"ember_triton_{key}"
    if name not in sys.modules:
        sys.modules[name] = load_module(name, found.files["py"], found.data["py"])
    return sys.modules[name]


def load_module(name: str, path: Path, source: bytes) -> ModuleType:
    """`source` run as module `name` whose file is `path` (what tracebacks and Triton's JIT see)."""
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BuildError(f"the Triton module {path} is not UTF-8: {e}") from e
    filename = str(path)
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # no mtime: never reread
    module = ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module  # while it runs: Triton's JIT looks its module up to read the kernels' source
    try:
        exec(compile(text, filename, "exec"), module.__dict__)  # ember's own generated source, verified
    except Exception as e:
        raise BuildError(f"the Triton module {path} failed to load: {type(e).__name__}: {e}") from e
    finally:
        del sys.modules[name]
    return module
