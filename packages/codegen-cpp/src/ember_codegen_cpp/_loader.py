"""Loading a built library into a wrapper's globals, on the wrapper's first call.

`compile()` does not wait for the compiler: the wrapper's segment globals (`ember_seg0` ...) start as stubs.
The first stub called waits for the build, loads the library with ctypes (argtypes set once), and rebinds every
segment global to its ctypes function, so later calls go straight to C++. If the build failed, the stubs raise
`UseFallback` instead: the wrapper then runs the graph in the interpreter codegen, now and on every call.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch  # noqa: F401 - loads torch's libgomp first, so our libraries share its OpenMP runtime and threads
from ember_core import Graph

from ._build import Build
from ._errors import BuildError
from ._fallback import UseFallback, report_fallback

_loaded: dict[str, ctypes.CDLL] = {}  # key → library, for the life of the process
_loaded_lock = threading.Lock()


def load_library(key: str, path: str) -> ctypes.CDLL:
    with _loaded_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = ctypes.CDLL(path)
        return lib


def is_loaded(key: str) -> bool:
    return key in _loaded


class LazyLibrary:
    """Binds `signatures` (segment name → (number of pointer args, number of int64 args)) into `env`."""

    def __init__(self, build: Build, graph: Graph, signatures: dict[str, tuple[int, int]], env: dict[str, Any]):
        self.build, self.graph, self.signatures, self.env = build, graph, signatures, env
        self._lock = threading.Lock()
        self.failed: str | None = None

    def install_stubs(self) -> None:
        for name in self.signatures:
            self.env[name] = self._stub(name)

    def _stub(self, name: str) -> Callable:
        def stub(*args: Any) -> int:
            self.load()
            return self.env[name](*args)

        return stub

    def load(self) -> None:
        """Wait for the build and bind the real functions (or the failing ones); idempotent."""
        with self._lock:
            if self.failed is not None:
                raise UseFallback(self.failed)
            if all(n in self.env and not _is_stub(self.env[n]) for n in self.signatures):
                return
            try:
                path = self.build.future.result()
                lib = load_library(self.build.key, str(path))
            except (BuildError, OSError) as e:
                self.failed = f"the C++ build failed: {e}"
                report_fallback(self.graph, self.failed)
                for name in self.signatures:
                    self.env[name] = _raise(self.failed)
                raise UseFallback(self.failed) from None
            bind(lib, self.signatures, self.env)


def bind(lib: ctypes.CDLL, signatures: dict[str, tuple[int, int]], env: dict[str, Any]) -> None:
    for name, (pointers, ints) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * ints
        fn.restype = ctypes.c_int
        env[name] = fn
    env["_library"] = lib


def _is_stub(fn: Any) -> bool:
    return getattr(fn, "__name__", "") in ("stub", "failed")


def _raise(reason: str) -> Callable:
    def failed(*args: Sequence[Any]) -> int:
        raise UseFallback(reason)

    return failed
