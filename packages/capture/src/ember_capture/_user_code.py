"""Which code and modules are the user's, and what names a code object reads.

The trace frontend follows reads of Python state only into the user's code: not torch's, not ember's, not the
standard library's or an installed package's (those are found by their directories, once per process).
"""

from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig
import types

import ember_core

from ._errors import is_torch_file


@functools.lru_cache(maxsize=4096)
def code_names(code: types.CodeType) -> tuple[tuple[str, ...], frozenset[str]]:
    """(global names loaded, in order of first load; attribute names loaded) by `code` and its nested code."""
    globals_: dict[str, None] = {}
    attrs: set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            globals_[ins.argval] = None
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"):
            attrs.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner_globals, inner_attrs = code_names(const)
            globals_.update(dict.fromkeys(inner_globals))
            attrs |= inner_attrs
    return tuple(globals_), frozenset(attrs)


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.add(os.path.dirname(ember_core.__file__))
    dirs.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return tuple(os.path.abspath(d) + os.sep for d in dirs)


def is_user_code(code: types.CodeType) -> bool:
    """Is `code` the user's (not torch's, ember's, the standard library's or an installed package's)?"""
    path = code.co_filename
    if path.startswith("<"):
        return not path.startswith("<frozen")
    return not is_torch_file(path) and not os.path.abspath(path).startswith(_library_dirs())


def user_module(module: types.ModuleType | None) -> bool:
    path = getattr(module, "__file__", None)
    return path is not None and not is_torch_file(path) and not os.path.abspath(path).startswith(_library_dirs())
