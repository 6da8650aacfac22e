"""ember-runtime's tests drive the runtime with a toy frontend. The session has a disk cache of its own, and each
test starts with no cached partition or plan (every stage runs)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import torch
from ember_core import from_fx, get_plugin_manager, hookimpl, reset_plugin_manager
from torch.fx.experimental.proxy_tensor import make_fx

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-runtime-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(autouse=True)
def stages_run(cold_stage_caches):
    """No partition or plan comes from an earlier test (ember-core's `cold_stage_caches`)."""
    yield


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
