"""Triton's parses of Python source hold ember's process-wide AST lock (`ember_core.ast_lock`).

Triton turns a function's source into an `ast` tree each time it needs one: for the function's cache key, again to
compile it, and in its interpreter to rewrite it. ember's GPU build compiles a program's kernels in threads, and
CPython before its fix of gh-106905 (3.11, CI's lowest session) fails two tree conversions that overlap with
"SystemError: AST constructor recursion depth mismatch". The parses overlap not only on ember's kernels and helpers
but on the functions of `triton.language` they call (the combine function of `tl.sum`), which are Triton's own
objects; so the lock goes on Triton's classes, once per process, before the first build: only the parse is
serialized, compile passes and ptxas still overlap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import triton
from ember_core import ast_lock, wrap_once


def lock_triton_parses() -> None:
    """Make every method by which Triton parses source hold `ast_lock()`: `JITFunction.parse` (found on whichever
    class of its bases defines it) and, where Triton's interpreter is loaded, its rewriter's `rewrite_ast`. Calling
    it again changes nothing; a Triton without one of them keeps what it has."""
    for owner, name in _parsing_methods():
        wrap_once(owner, name, _holding_the_lock, "ast-lock")


def _parsing_methods() -> Iterator[tuple[type, str]]:
    owner = next((c for c in triton.runtime.JITFunction.__mro__ if "parse" in vars(c)), None)
    if owner is not None:
        yield owner, "parse"
    interpreter = sys.modules.get("triton.runtime.interpreter")  # loaded by Triton under TRITON_INTERPRET=1
    rewriter = getattr(interpreter, "FunctionRewriter", None)
    if rewriter is not None and "rewrite_ast" in vars(rewriter):
        yield rewriter, "rewrite_ast"


def _holding_the_lock(method: Callable) -> Callable:
    def locked(*args: Any, **kwargs: Any) -> Any:
        with ast_lock():
            return method(*args, **kwargs)

    return locked
