"""Loading a built library with ctypes and binding its segment functions into a wrapper's globals.

The shared `LazyBinding` does the waiting and the fallback; what is C++ here is the binding: each segment is an
`extern "C"` function taking pointers then int64 symbols, its argtypes set once, so later calls go straight to C++.
A library is loaded once per process (`_loaded`), however many graphs share it. A unit built in parts is several
libraries (`LibrariesBuild`); each function is bound from the part that exports it.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import torch  # noqa: F401 - loads torch's libgomp first, so our libraries share its OpenMP runtime and threads
from ember_core import Graph
from ember_lowering.codegen import Build, LazyBinding

from ._build import LibrariesBuild

_loaded: dict[str, ctypes.CDLL] = {}  # key → library, for the life of the process
_loaded_lock = threading.Lock()


def load_library(key: str, path: str) -> ctypes.CDLL:
    with _loaded_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = ctypes.CDLL(path)
        return lib


def is_loaded(build: Build) -> bool:
    parts = build.parts if isinstance(build, LibrariesBuild) else (build,)
    return all(p.key in _loaded for p in parts)


class Libraries:
    """The parts of a split unit as one library: an attribute is the function of that name in whichever part
    exports it (a segment, an entry point, a tuned kernel's `ember_pick_`...)."""

    def __init__(self, libs: list[ctypes.CDLL]):
        self.libs = libs

    def __getattr__(self, name: str) -> Any:
        for lib in self.libs:
            try:
                return getattr(lib, name)
            except AttributeError:
                pass
        raise AttributeError(f"no part of the library exports {name}")


class LazyLibrary(LazyBinding):
    """Binds `signatures` (segment name → (number of pointer args, number of int64 args)) into `env`."""

    def __init__(self, build: Build, graph: Graph, signatures: dict[str, tuple[int, int]], env: dict[str, Any]):
        def bind_files(files: dict | list[dict], env: dict[str, Any]) -> None:
            if isinstance(build, LibrariesBuild):
                libs = [load_library(p.key, str(f["so"])) for p, f in zip(build.parts, files)]
                bind(Libraries(libs), signatures, env)
            else:
                bind(load_library(build.key, str(files["so"])), signatures, env)

        super().__init__(build, graph, signatures, env, bind_files, "codegen-cpp")


def bind(lib: ctypes.CDLL | Libraries, signatures: dict[str, tuple[int, int]], env: dict[str, Any]) -> None:
    for name, (pointers, ints) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * ints
        fn.restype = ctypes.c_int
        env[name] = fn
    env["_library"] = lib
