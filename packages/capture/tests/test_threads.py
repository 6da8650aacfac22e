"""The trace frontend under threads: tracing is serialized, results equal eager's, and the `print` and
`Tensor.register_hook` interception never leaks to other threads or outlives the trace."""

from __future__ import annotations

import builtins
import threading

import torch
from ember_capture import TraceFrontend
from ember_core.testing import in_threads
from torch.testing import assert_close

PRINT, REGISTER_HOOK = builtins.print, torch.Tensor.register_hook


def test_four_threads_compile_modules_at_once(compile_graph):
    def work(k: int) -> None:
        torch.manual_seed(k)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        compiled = TraceFrontend().wrap(model, compile_graph, {})
        for n in (3, 5, 7):
            x = torch.randn(n, 8)
            assert_close(compiled(x), model(x))

    for _ in range(3):
        in_threads(work)
    assert builtins.print is PRINT and torch.Tensor.register_hook is REGISTER_HOOK


def test_one_traced_function_shared_by_threads_compiles_each_shape_once(compile_graph):
    compiled = TraceFrontend().wrap(lambda x: (x * 2).sin(), compile_graph, {"dynamic": False})
    x = torch.randn(6)
    in_threads(lambda k: [assert_close(compiled(x), (x * 2).sin()) for _ in range(20)])
    assert compile_graph.count == 1 and len(compiled.entries) == 1


def test_other_threads_print_while_a_trace_runs(compile_graph, capsys):
    tracing, printed = threading.Event(), threading.Event()

    def slow(x):
        if not tracing.is_set():
            tracing.set()
            assert printed.wait(30), "the other thread could not print while this one traced"
        return x + 1

    compiled = TraceFrontend().wrap(slow, compile_graph, {})

    def other() -> None:
        assert tracing.wait(30)
        print("hello from another thread")
        printed.set()

    t = threading.Thread(target=other)
    t.start()
    assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    t.join(30)
    assert "hello from another thread" in capsys.readouterr().out
    assert builtins.print is PRINT


def test_print_inside_a_traced_function_still_falls_back_and_is_restored(compile_graph, capsys):
    def f(x):
        print("inside")
        return x * 3

    compiled = TraceFrontend().wrap(f, compile_graph, {})
    assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert compiled.fallback_reason is not None and "print" in compiled.fallback_reason
    assert builtins.print is PRINT and torch.Tensor.register_hook is REGISTER_HOOK
    assert "inside" in capsys.readouterr().out
