"""Fixtures for ember-capture's tests: a trivial compile_graph (ember-core's interpreter) and an event recorder."""

from __future__ import annotations

import ember_core
import pytest
import torch


class CountingCompiler:
    """`compile_graph` for tests: runs graphs with ember-core's Interpreter and remembers every graph it got."""

    def __init__(self) -> None:
        self.graphs: list[ember_core.Graph] = []

    def __call__(self, graph: ember_core.Graph, example_inputs: list):
        self.graphs.append(graph)
        return ember_core.Interpreter(graph).run

    @property
    def count(self) -> int:
        return len(self.graphs)


class EventRecorder:
    def __init__(self) -> None:
        self.events: list[ember_core.Event] = []

    @ember_core.hookimpl
    def ember_event(self, event: ember_core.Event) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[ember_core.Event]:
        return [e for e in self.events if e.kind == kind]


_recorder = EventRecorder()


@pytest.fixture
def compile_graph() -> CountingCompiler:
    return CountingCompiler()


@pytest.fixture
def events() -> EventRecorder:
    pm = ember_core.get_plugin_manager()
    if pm.pm.get_plugin("capture-tests") is None:
        pm.register(_recorder, "capture-tests")
    _recorder.events.clear()
    return _recorder


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield

