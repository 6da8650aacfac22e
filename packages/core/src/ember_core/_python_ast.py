"""Parsing Python source into `ast` trees one thread at a time.

CPython before 3.12's fix of gh-106905 (3.11: CI's lowest session) keeps the recursion depth of its conversion
between C and Python syntax trees in one interpreter-wide counter. Two threads inside `ast.parse` (or `compile` of
a tree) at once can leave it off, and the later one fails with "SystemError: AST constructor recursion depth
mismatch": seen when a forward and a backward graph built side by side, each in its own build thread, and Triton
parsed the kernels' functions in both. Every parse ember does goes through `parse_python`, and the Triton codegen
makes Triton's parses take the same lock (`ast_lock`), so no two overlap.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()


def ast_lock() -> threading.RLock:
    """The lock every `ast.parse` (or `compile` of a tree) in an ember process holds."""
    return _LOCK


def parse_python(source: str, mode: str = "exec", filename: str = "<unknown>") -> ast.AST:
    """`ast.parse(source, filename, mode)` holding `ast_lock()`. Parsing builds a tree; it never runs the code."""
    with _LOCK:
        return ast.parse(source, filename, mode)
