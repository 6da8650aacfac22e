"""Loading a built library with ctypes and binding its segment functions into a wrapper's globals.

The shared `LazyBinding` does the waiting and the fallback; what is C++ here is the binding: each segment is an
`extern "C"` function taking pointers then int64 symbols, its argtypes set once, so later calls go straight to C++.
A library is loaded once per process (`_loaded`), however many graphs share it.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import torch  # noqa: F401 - loads torch's libgomp first, so our libraries share its OpenMP runtime and threads
from ember_core import Graph
from ember_lowering.codegen import Build, LazyBinding

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


class LazyLibrary(LazyBinding):
    """Binds `signatures` (segment name → (number of pointer args, number of int64 args)) into `env`."""

    def __init__(self, build: Build, graph: Graph, signatures: dict[str, tuple[int, int]], env: dict[str, Any]):
        def bind_files(files: dict, env: dict[str, Any]) -> None:
            bind(load_library(build.key, str(files["so"])), signatures, env)

        super().__init__(build, graph, signatures, env, bind_files, "codegen-cpp")


def bind(lib: ctypes.CDLL, signatures: dict[str, tuple[int, int]], env: dict[str, Any]) -> None:
    for name, (pointers, ints) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * ints
        fn.restype = ctypes.c_int
        env[name] = fn
    env["_library"] = lib
