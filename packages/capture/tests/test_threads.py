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


def test_text_written_into_a_buffer_while_tracing_is_no_side_effect(compile_graph):
    """`print(..., file=buffer)` writes where nobody sees it until the program reads the buffer: logging formats an
    exception's traceback that way (fake tensors log a data-dependent op's failure while a trace runs). It was
    refused as a print, and the function ran eagerly for good (training fuzzer, trace frontend with `--floats`: 10
    of 60 programs)."""
    import io
    import logging

    def f(x):
        buffer = io.StringIO()
        print("kept", file=buffer)
        try:
            raise ValueError("formatted")
        except ValueError:
            logging.Formatter().formatException(__import__("sys").exc_info())
        return x * 3

    compiled = TraceFrontend().wrap(f, compile_graph, {})
    assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert compiled.fallback_reason is None and compile_graph.count == 1


# ---------------------------------------------------------------------------------------------- other threads
# While one thread traces, the trace's stand-ins (functional and fake tensors, symbolic floats) must never be
# where another thread can see them: in a module's parameters, in a global, in a closure cell.


def _tracing(x) -> bool:
    return type(x) is not torch.Tensor  # the traced function sees functional stand-ins, eager calls real tensors


class _Paused:
    """Holds the first trace open until another thread has done its eager work (`run`), then lets it go on."""

    def __init__(self, run):
        self.run, self.done, self.error = run, False, None

    def __call__(self, x) -> None:
        if self.done or not _tracing(x):
            return
        self.done = True
        worker = threading.Thread(target=self._other_thread)
        worker.start()
        worker.join(30)

    def _other_thread(self) -> None:
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            self.error = e


class _PausingModel(torch.nn.Module):
    def __init__(self, pause):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("offset", torch.ones(4))
        self.pause = pause

    def forward(self, x):
        self.pause(x)
        return self.fc(x) + self.offset


def test_eager_calls_of_a_module_in_another_thread_see_its_own_parameters(compile_graph):
    x = torch.randn(3, 4)
    seen = {}

    def eager_elsewhere():
        seen["weight"] = model.fc.weight
        seen["out"] = model(x)

    pause = _Paused(eager_elsewhere)
    model = _PausingModel(pause)
    weight = model.fc.weight
    with torch.no_grad():
        expected = model.fc(x) + model.offset
    compiled = TraceFrontend().wrap(model, compile_graph, {})
    assert_close(compiled(x), expected)
    assert pause.done and pause.error is None, pause.error
    assert seen["weight"] is weight and type(seen["weight"]) is torch.nn.Parameter
    assert_close(seen["out"], expected)
    assert model.fc.weight is weight


WEIGHT = torch.randn(4, 4)
SCALE = 0.5


def test_globals_and_cells_read_by_a_trace_stay_real_for_other_threads(compile_graph):
    cell = torch.randn(4)
    seen = []

    def look():
        seen.append((WEIGHT, cell, SCALE))

    pause = _Paused(look)

    def f(x):
        pause(x)
        return (x @ WEIGHT + cell) * SCALE

    compiled = TraceFrontend().wrap(f, compile_graph, {})
    x = torch.randn(3, 4)
    global SCALE
    for scale in (0.5, 2.0, 3.0):  # the second value retraces with SCALE as a graph input
        SCALE = scale
        pause.done = False
        assert_close(compiled(x), (x @ WEIGHT + cell) * scale)
        assert pause.error is None, pause.error
    SCALE = 0.5
    assert seen, "no trace was held open"
    for weight, c, scale in seen:
        assert weight is WEIGHT and c is cell and type(scale) is float


class _RebindsItsBuffer(torch.nn.Module):
    """`self.total = self.total + x`: a new tensor assigned to a buffer, which no graph can replay."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total = self.total + x.sum(0)
        return x * 2


def test_a_buffer_rebound_while_traced_runs_eagerly_and_is_kept(compile_graph, events):
    model, twin = _RebindsItsBuffer(), _RebindsItsBuffer()
    compiled = TraceFrontend().wrap(model, compile_graph, {})
    for _ in range(3):
        x = torch.randn(2, 4)
        assert_close(compiled(x), twin(x))
        assert type(model.total) is torch.Tensor
        assert_close(model.total, twin.total)
    assert compiled.fallback_reason is not None and "total" in compiled.fallback_reason
    assert events.of("fallback")
