"""Compiled autograd: the whole backward pass captured at run time, then compiled with ember's stages.

`with ember.compiled_autograd.enable(): loss.backward()` installs a compiler in the autograd engine's
compiled-autograd hook (torch._dynamo.compiled_autograd). When a backward starts, the engine looks its autograd graph
up in its cache (by the nodes' kinds and the sizes they saw); on a miss it traces the graph into one FX graph: every
node's backward formula, the hooks the user registered (tensor hooks, module full-backward hooks, post-accumulate-grad
hooks) and the gradient accumulation into `.grad`. That FX graph comes here, and ember compiles it as it compiles
a forward: Dynamo captures it (inlining the hooks), then ember's capture, passes and the device's codegen. What
AOT autograd cannot give, this does: one backward graph across the graph breaks of the forward, with the hooks in
it.

A graph that ember compiled for training contributes its own backward: under compiled autograd its autograd node
hands Dynamo the backward graph as an FX module of ATen calls, so it is inlined into the captured backward (see
`ember_autograd._wrapper`). The joint trace itself runs with compiled autograd off.

Each capture reports a `backward_captured` event with the engine's reason for the miss
(`EMBER_LOGS=compiled_autograd` prints them): "new autograd node: GraphRoot ..." for the first, "new autograd node:
AccumulateGrad ..." when `.grad` appears, "changed shapes ..." when a size first changes (it is then symbolic).
`options={"compiled_autograd": True}` on `ember.compile` runs every call of the compiled function inside `enable()`,
so the backward it calls (a whole training step) is captured too.

Limit: a forward that registers a hook on an intermediate tensor, or runs a module with a full backward hook, is
handed to ember by Dynamo with a `BackwardState` input (the hooks' home until the backward runs), which ember's
capture cannot hold: that forward graph runs eagerly (a `fallback` event says so), and its backward, hooks
included, is still captured and compiled with the rest.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from ember_core import Event, emit

from ._pipeline import Pipeline


class _Reasons(logging.Handler):
    """Collects the engine's cache-miss lines (its verbose logger) until the next capture reports them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Cache miss"):
            with self._lock:
                self.lines.append(message.removeprefix("Cache miss due to ").strip())

    def take(self) -> list[str]:
        with self._lock:
            lines, self.lines = self.lines, []
        return lines


_reasons = _Reasons()
_engine_log = logging.getLogger("ember.compiled_autograd.engine")  # what the engine writes to; never printed
_engine_log.addHandler(_reasons)
_engine_log.setLevel(logging.DEBUG)
_engine_log.propagate = False


class BackwardCompiler:
    """What the engine calls with each traced backward graph: `compiler(gm) -> callable`. Its graphs are named
    `backward_<capture>_...` by the dynamo frontend."""

    def __init__(self, options: Mapping[str, Any] | None, fullgraph: bool, dynamic: bool):
        self.options = {k: v for k, v in (options or {}).items() if k != "compiled_autograd"}
        self.options["frontend"] = "dynamo"  # the hooks in the graph are Python: Dynamo inlines them
        self.fullgraph, self.dynamic = fullgraph, dynamic
        self.captures = 0

    def __call__(self, gm: torch.fx.GraphModule) -> Callable:
        self.captures += 1
        _accumulate_missing_as_nothing(gm)
        reasons = _reasons.take() or ["no reason given by the engine"]
        nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        message = f"backward {self.captures} captured ({nodes} calls): {'; '.join(reasons)}"
        emit(Event("backward_captured", "compiled_autograd", message,
                   data={"reasons": reasons, "calls": nodes, "capture": self.captures}))
        pipeline = Pipeline.from_options(self.options, fullgraph=self.fullgraph, dynamic=self.dynamic, mode=None)
        return pipeline.frontend().wrap(gm, pipeline.compile_graph, pipeline.frontend_options)


def _accumulate(old: torch.Tensor | None, new: torch.Tensor | None) -> torch.Tensor | None:
    """Two gradients flowing into one tensor, either of them possibly missing (None)."""
    if old is None:
        return new
    if new is None:
        return old
    return torch.add(old, new)


def _accumulate_missing_as_nothing(gm: torch.fx.GraphModule) -> None:
    """The engine traces the sum of two gradients flowing into one tensor as `torch.add`, before it runs the
    backwards that give them: it takes every edge of a node to give one. An `autograd.Function` (ember's node, or
    a user's) may give None for an input it does not reach, and the add then raised TypeError. In eager autograd a
    missing gradient adds as nothing: each such add becomes `_accumulate`, which Dynamo resolves while tracing (the
    Nones are known then)."""
    adds = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.add
            and len(n.args) == 2 and not n.kwargs]
    for node in adds:
        node.target = _accumulate
    if adds:
        gm.recompile()


@contextlib.contextmanager
def enable(options: Mapping[str, Any] | None = None, *, fullgraph: bool = False,
           dynamic: bool = True) -> Iterator[BackwardCompiler]:
    """Inside, every backward (`loss.backward()`, `torch.autograd.grad`) is captured whole at run time and compiled
    with ember, `options` as for `ember.compile`. `dynamic=True`: the engine marks a size symbolic once it changes,
    rather than capturing again for every size. `fullgraph=True` makes a graph break in the backward (a hook Dynamo
    cannot trace) an error. Yields the compiler, whose `captures` counts the backward graphs it compiled.

    The engine's cache of captured backwards is the process's, not the context's: a backward captured under one
    `enable()` is reused under the next (`reset()` forgets them all)."""
    with _enabled(BackwardCompiler(options, fullgraph, dynamic)) as compiler:
        yield compiler


@contextlib.contextmanager
def _enabled(compiler: BackwardCompiler) -> Iterator[BackwardCompiler]:
    with torch._dynamo.compiled_autograd._enable(compiler, dynamic=compiler.dynamic):
        torch._C._dynamo.compiled_autograd.set_verbose_logger(_engine_log)
        try:
            yield compiler
        finally:
            torch._C._dynamo.compiled_autograd.set_verbose_logger(None)


def reset() -> None:
    """Forget every captured backward (the next backward of each kind is captured and compiled again)."""
    torch._dynamo.compiled_autograd.reset()
    _reasons.take()


def is_enabled() -> bool:
    """Whether a backward started now would be captured by compiled autograd."""
    return bool(torch._dynamo.compiled_autograd.compiled_autograd_enabled)


def wrap(fn: Callable, options: Mapping[str, Any] | None, *, fullgraph: bool, dynamic: bool | None) -> Callable:
    """`fn` with every call inside `enable(options)`: option `compiled_autograd` of `ember.compile`. One compiler
    serves every call."""
    compiler = BackwardCompiler(options, fullgraph, dynamic is not False)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _enabled(compiler):
            return fn(*args, **kwargs)

    run.backward_compiler = compiler  # type: ignore[attr-defined]
    return run
