"""The GPU build's preparation of a module's Triton functions before its threads compile them (`_precompile.py`)."""

from __future__ import annotations

import ast
import threading
import types

from ember_codegen_triton import _precompile
from triton.runtime import JITFunction


def helper(a):
    return a + 1


def kernel(x):
    helper(x)


def test_the_functions_of_a_module_parse_one_at_a_time():
    """CPython's AST construction keeps its recursion depth per interpreter (gh-106905): two `ast.parse` at once,
    in two build threads, failed a forward and backward built side by side with "SystemError: AST constructor
    recursion depth mismatch" (Python 3.11, Triton 3.6). Each Triton function's parse now takes one lock."""
    module = types.SimpleNamespace(kernel=JITFunction(kernel), helper=JITFunction(helper), other=3)
    module.alias = module.kernel  # kernels of one body share one function (`_dedup.py`)
    _precompile.parse_one_at_a_time(module)
    _precompile.parse_one_at_a_time(module)  # a second build of the module wraps nothing twice
    assert isinstance(module.kernel.parse(), ast.Module) and isinstance(module.helper.parse(), ast.Module)
    assert module.kernel.parse.args[0].__self__ is module.kernel  # Triton's own parse inside one wrapper
    with _precompile._PARSE:  # a parse in progress elsewhere: this one waits for it
        waiting = threading.Thread(target=module.helper.parse)
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive()
    waiting.join(10)
    assert not waiting.is_alive()
