"""Triton's parses of Python source hold ember's AST lock (`_parse_lock.py`)."""

from __future__ import annotations

import ast
import sys
import threading

import pytest
import torch
import triton
import triton.language.standard
from ember_codegen_triton import _parse_lock
from ember_core import ast_lock, wrapped_by
from helpers import check


def helper(a):
    return a + 1


def _parse_owner() -> type:
    return next(c for c in triton.runtime.JITFunction.__mro__ if "parse" in vars(c))


def _waits_for_the_lock(call) -> bool:
    """Does `call` in another thread wait while this one holds the AST lock, and finish once it is free?"""
    with ast_lock():
        waiting = threading.Thread(target=call)
        waiting.start()
        waiting.join(0.3)
        waited = waiting.is_alive()
    waiting.join(10)
    return waited and not waiting.is_alive()


@pytest.fixture
def triton_as_shipped(monkeypatch):
    """Triton's classes as Triton defines them for one test; whatever the process had returns after it."""
    for owner, name in _parse_lock._parsing_methods():
        method = vars(owner)[name]
        while "ast-lock" in wrapped_by(method):
            method = method.__wrapped__
        monkeypatch.setattr(owner, name, method)


def _a_function_of_triton_language():
    """A function `triton.language` defines, and how Triton parses it: a JITFunction's `parse`, or in Triton's
    interpreter (`TRITON_INTERPRET=1`) its rewriter's `rewrite_ast`."""
    interpreted = getattr(sys.modules.get("triton.runtime.interpreter"), "InterpretedFunction", ())
    for f in vars(triton.language.standard).values():
        if isinstance(f, triton.runtime.JITFunction):
            return lambda: f.parse()  # looked up at each call: the lock goes on the class
        if interpreted and isinstance(f, interpreted):
            return lambda: f.rewriter.rewrite_ast()
    raise AssertionError("triton.language.standard defines no function ember knows how Triton parses")


def test_every_triton_function_parses_holding_the_lock(triton_as_shipped):
    """CPython's tree conversion keeps its recursion depth per interpreter (gh-106905): two `ast.parse` at once, in
    two build threads, failed a forward and backward built side by side with "SystemError: AST constructor
    recursion depth mismatch" (Python 3.11, Triton 3.6), even after the kernels' own functions took a lock: the
    threads also parse the functions of `triton.language` the kernels call, Triton's objects."""
    parse_standard = _a_function_of_triton_language()
    mine = triton.runtime.JITFunction(helper)
    assert not _waits_for_the_lock(parse_standard) and not _waits_for_the_lock(mine.parse)  # as Triton ships
    _parse_lock.lock_triton_parses()
    _parse_lock.lock_triton_parses()  # again: nothing is wrapped twice
    for owner, name in _parse_lock._parsing_methods():
        locked = vars(owner)[name]
        assert "ast-lock" in wrapped_by(locked) and "ast-lock" not in wrapped_by(locked.__wrapped__)
    assert isinstance(mine.parse(), ast.Module)
    assert _waits_for_the_lock(parse_standard) and _waits_for_the_lock(mine.parse)


def test_a_compile_locks_tritons_parses_before_it_builds(triton_as_shipped):
    assert "ast-lock" not in wrapped_by(vars(_parse_owner())["parse"])
    check(lambda x: (torch.sigmoid(x) * 2,), torch.randn(8, 3))
    assert "ast-lock" in wrapped_by(vars(_parse_owner())["parse"])
