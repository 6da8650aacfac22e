"""The plugin: autograd `aot`, found by entry point."""

from __future__ import annotations

import importlib.metadata

from ember_autograd import AOTAutograd
from ember_core import PluginManager
from ember_core.plugins._stages import Autograd


def test_entry_point_registers_autograd_aot():
    [ep] = [ep for ep in importlib.metadata.entry_points(group="ember") if ep.value == "ember_autograd._plugin"]
    assert ep.dist.metadata["name"] == "ember-autograd"
    manager = PluginManager(load_entrypoints=False, env={})
    manager.register(ep.load(), name=ep.name)
    assert isinstance(manager.registry.find("autograd", "aot").impl, AOTAutograd)


def test_implements_the_autograd_protocol():
    assert isinstance(AOTAutograd(), Autograd)
