"""ember-capture registers its two frontends through the `ember` entry-point group, like any plugin."""

from __future__ import annotations

import importlib.metadata

import ember_core
from ember_capture import DynamoFrontend, TraceFrontend
from ember_capture._plugin import ember_register


def test_entry_point_names_the_plugin_module():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="ember")}
    assert eps["capture"] == "ember_capture._plugin"


def test_registers_dynamo_first_and_trace():
    registry = ember_core.PluginRegistry()
    ember_register(registry)
    assert isinstance(registry.find("frontend").impl, DynamoFrontend)
    assert isinstance(registry.find("frontend", "trace").impl, TraceFrontend)
    assert all(callable(getattr(i.impl, "wrap", None)) for i in registry.all("frontend"))
