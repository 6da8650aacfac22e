"""`parse_python`: every parse of Python source in an ember process holds one lock (`_python_ast.py`)."""

from __future__ import annotations

import ast
import gc
import sys
import threading

import pytest
from ember_core import ast_lock, parse_python


def test_it_parses_as_ast_parse_does():
    assert ast.dump(parse_python("a + f(b)", mode="eval")) == ast.dump(ast.parse("a + f(b)", mode="eval"))
    assert isinstance(parse_python("def f():\n    return 1\n"), ast.Module)
    with pytest.raises(SyntaxError, match="<graph text>"):
        parse_python("f(", mode="eval", filename="<graph text>")


def test_a_parse_waits_while_another_thread_holds_the_lock():
    done = []
    with ast_lock():
        waiting = threading.Thread(target=lambda: done.append(parse_python("x", mode="eval")))
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive() and not done
    waiting.join(10)
    assert not waiting.is_alive() and len(done) == 1


def test_parses_in_many_threads_at_once_all_succeed():
    """The failure it prevents (gh-106905), made likely: Python code runs at every garbage collection (a gc
    callback) and threads switch every microsecond, so a thread gives up the GIL inside another's tree conversion.
    With plain `ast.parse` this failed 3 of 4 threads on Python 3.11.7 ("AST constructor recursion depth
    mismatch"); through `parse_python` none fails, on any Python."""
    source = "\n".join(f"def f{i}(a, b):\n    return (a + b) * [x for x in range(a)] if a > b else {{a: b}}"
                       for i in range(200))
    errors: list[BaseException] = []

    def parse_often():
        try:
            for _ in range(40):
                parse_python(source)
        except SystemError as e:
            errors.append(e)

    interval = sys.getswitchinterval()
    callback = lambda phase, info: sum(range(50))  # noqa: E731 - Python code run at each collection
    sys.setswitchinterval(1e-6)
    gc.callbacks.append(callback)
    try:
        threads = [threading.Thread(target=parse_often) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.callbacks.remove(callback)
        sys.setswitchinterval(interval)
    assert errors == []
