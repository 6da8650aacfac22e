"""Binding built kernels into a wrapper's globals on the wrapper's first call.

`compile()` does not wait for a build: the wrapper's segment globals (`ember_seg0` ...) start as stubs. The first
stub called waits for the build, lets the codegen bind the real callables into the wrapper's globals (`bind`:
codegen-cpp loads a library with ctypes), so later calls go straight to the kernels. If the build failed, the
stubs raise `UseFallback` instead: the wrapper then runs the graph in the interpreter codegen, now and on every
call, and the failure is reported once as a `fallback` event. A build that verified but does not bind (`BindError`:
a library that does not load, or lacks a function) is a corrupt cache entry: it is discarded and built again, once,
before the graph falls back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from ember_core import Event, Graph, Stopwatch, emit

from ._build_pool import Build
from ._errors import BindError, BuildError
from ._fallback import UseFallback, report_fallback

Binder = Callable[[Any, dict[str, Any]], None]  # (the build's result, the wrapper's globals)


class LazyBinding:
    """The segment globals `names` of a wrapper's `env`, bound by `bind` once `build` is done."""

    def __init__(self, build: Build, graph: Graph, names: Iterable[str], env: dict[str, Any], bind: Binder,
                 stage: str):
        self.build, self.graph, self.env, self.bind, self.stage = build, graph, env, bind, stage
        self.names = tuple(names)
        self._lock = threading.Lock()
        self._bound = False
        self._rebuilt = False  # a build that did not bind was made again (once)
        self.failed: str | None = None

    def install_stubs(self) -> None:
        """Each segment global a stub that waits for the build; `_ready` (which a consuming wrapper calls before
        it lets its inputs go, so that a failed build still falls back on them) the wait alone."""
        for name in self.names:
            self.env[name] = self._stub(name)
        self.env["_ready"] = self.load

    def _stub(self, name: str) -> Callable:
        def stub(*args: Any) -> Any:
            self.load()
            return self.env[name](*args)

        return stub

    def load(self) -> None:
        """Wait for the build and bind the real functions (or the failing ones); idempotent."""
        with self._lock:
            if self.failed is not None:
                raise UseFallback(self.failed)
            if self._bound:
                return
            waiting = Stopwatch()
            try:
                self._bind_or_rebuild()
            except (BuildError, BindError, OSError) as e:
                self.failed = f"the build failed, the graph runs in the interpreter codegen: {e}"
                report_fallback(self.stage, self.graph, self.failed, "build")
                self.install_stubs()  # in case bind set some: each stub now raises UseFallback from load()
                raise UseFallback(self.failed) from None
            self._bound = True
            self.env["_ready"] = nothing_to_wait_for
            if not self.build.hit:
                self._report_built(waiting.seconds)

    def _bind_or_rebuild(self) -> None:
        try:
            self.bind(self.build.future.result(), self.env)
        except BindError as e:
            again = None if self._rebuilt else self.build.rebuild(f"it does not bind: {e}")
            if again is None:
                raise
            self.build, self._rebuilt = again, True
            self.bind(again.future.result(), self.env)

    def _report_built(self, waited: float) -> None:
        """The `kernels_built` event: how long the build took, and how long the first call waited for it."""
        seconds = self.build.seconds if self.build.seconds is not None else waited
        emit(Event(kind="kernels_built", stage=self.stage, graph=self.graph,
                   message=f"graph {self.graph.name!r}: kernels built in {seconds:.3f}s "
                           f"(the first call waited {waited:.3f}s)",
                   data={"seconds": seconds, "waited": waited}))

    def bind_now(self) -> None:
        """Bind a build that is already done (a cache hit) without stubs; `BindError` if it cannot be bound, after
        starting its rebuild (which the stubs then wait for)."""
        with self._lock:
            try:
                self.bind(self.build.future.result(), self.env)
            except BindError as e:
                self.build = self.build.rebuild(f"it does not bind: {e}") or self.build
                self._rebuilt = True
                raise
            self._bound = True


def nothing_to_wait_for() -> None:
    """`_ready` of a wrapper whose kernels are bound, or that has none to bind."""
