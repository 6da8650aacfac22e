"""Loading a built library with ctypes and binding its segment functions into a wrapper's globals.

The shared `LazyBinding` does the waiting and the fallback; what is C++ here is the binding: each segment is an
`extern "C"` function taking pointers then int64 symbols, its argtypes set once, so later calls go straight to C++.
A library is loaded once per process (`_loaded`), however many graphs share it. A unit built in parts is several
libraries (`LibrariesBuild`); each function is bound from the part that exports it.

A library is loaded from the very file the disk cache verified: by its open descriptor (`/proc/self/fd/N`), never by
its name in the cache directory, which could name another file by then. The descriptor stays open for the life of
the process (`_pinned`: the dynamic loader knows a library by the path it was given, so a descriptor number reused
for another library would hand back the first one's functions; another entry's handle is refused all the same). A
library that does not load, or lacks a function, is a `BindError`: the shared layer discards its cache entry and
builds it again.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import torch  # noqa: F401 - loads torch's libgomp first, so our libraries share its OpenMP runtime and threads
from ember_core import CacheLookup, EntryFile, Graph
from ember_lowering.codegen import BindError, Build, LazyBinding

from ._build import LibrariesBuild

_loaded: dict[str, ctypes.CDLL] = {}  # key → library, for the life of the process
_pinned: list[EntryFile] = []  # the open file of every library loaded by descriptor: never closed
_handles: dict[int, str] = {}  # the dynamic loader's handle of every library loaded → its key
_loaded_lock = threading.Lock()


def load_library(key: str, found: CacheLookup) -> ctypes.CDLL:
    """The library of the verified entry `found` (loaded once per key and process)."""
    opened = found.opened["so"]
    with _loaded_lock:
        lib = _loaded.get(key)
        if lib is not None:
            opened.close()  # this process has the library already, from an earlier lookup
            return lib
        by_descriptor = os.path.isdir("/proc/self/fd")
        try:
            lib = ctypes.CDLL(opened.loadable if by_descriptor else str(opened.path))
        except OSError as e:
            opened.close()
            raise BindError(f"{opened.path.name} does not load: {e}") from e
        if by_descriptor:
            _pinned.append(opened)
        if _handles.setdefault(lib._handle, key) != key:
            raise BindError(f"{opened.path.name} loaded as the library of another entry")
        _loaded[key] = lib
        return lib


def forget_library(key: str) -> None:
    """Stop handing out the library of `key` (it failed to bind); it stays mapped, its descriptor open."""
    with _loaded_lock:
        _loaded.pop(key, None)


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
        def bind_files(found: CacheLookup | list[CacheLookup], env: dict[str, Any]) -> None:
            built = self.build  # a rebuild replaces it
            parts = list(zip(built.parts, found)) if isinstance(built, LibrariesBuild) else [(built, found)]
            libs = [load_library(p.key, f) for p, f in parts]
            try:
                bind(Libraries(libs) if len(libs) > 1 else libs[0], signatures, env)
            except BindError:
                for p, _ in parts:
                    forget_library(p.key)
                raise

        super().__init__(build, graph, signatures, env, bind_files, "codegen-cpp")


def bind(lib: ctypes.CDLL | Libraries, signatures: dict[str, tuple[int, int]], env: dict[str, Any]) -> None:
    for name, (pointers, ints) in signatures.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise BindError(f"the library does not export {name}") from e
        fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * ints
        fn.restype = ctypes.c_int
        env[name] = fn
    env["_library"] = lib
