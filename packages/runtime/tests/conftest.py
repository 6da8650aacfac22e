from __future__ import annotations

import pytest
import torch
from ember_core import from_fx, get_plugin_manager, hookimpl, reset_plugin_manager
from torch.fx.experimental.proxy_tensor import make_fx


class ToyFrontend:
    """Traces the whole function once per call with make_fx: enough to drive the runtime without ember-capture."""

    def __init__(self) -> None:
        self.graphs = []

    def wrap(self, fn, compile_graph, options):
        def run(*args):
            graph = from_fx(make_fx(fn)(*args), name=getattr(fn, "__name__", "fn"))
            self.graphs.append(graph)
            out = compile_graph(graph, list(args))(list(args))
            return out[0] if len(out) == 1 else tuple(out)

        return run


class ToyPlugin:
    def __init__(self) -> None:
        self.frontend = ToyFrontend()

    @hookimpl
    def ember_register(self, registry):
        registry.add("frontend", "toy", self.frontend)


@pytest.fixture
def toy():
    """A fresh plugin manager with the toy frontend registered by hand."""
    reset_plugin_manager()
    plugin = ToyPlugin()
    get_plugin_manager().register(plugin, name="toy")
    yield plugin
    reset_plugin_manager()


@pytest.fixture
def x():
    return torch.randn(4, 8)
