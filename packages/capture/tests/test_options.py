"""Capture's options: `recompile_limit` declared, registered and defaulted here only; torch.compile's arguments
(`fullgraph`, `dynamic`) get their meaning when left out; other keys pass through."""

from __future__ import annotations

import pytest
from ember_capture import _plugin
from ember_capture._options import OPTIONS, options_of
from ember_core import OptionError, PluginManager


@pytest.fixture
def registry():
    manager = PluginManager(load_entrypoints=False, env={"EMBER_OPTIONS": '{"recompile_limit": 3}'})
    manager.register(_plugin, name="capture")
    return manager


def test_defaults_fill_missing_and_none_values():
    assert options_of(None) == {"fullgraph": False, "dynamic": None, "recompile_limit": 8}
    opts = options_of({"fullgraph": 1, "recompile_limit": None, "dynamic": False, "codegen.cpu": "cpp"})
    assert opts["fullgraph"] is True and opts["recompile_limit"] == 8 and opts["dynamic"] is False
    assert opts["codegen.cpu"] == "cpp"


def test_recompile_limit_is_registered_by_capture_with_the_same_default(registry):
    spec = registry.registry.options["recompile_limit"]
    assert (spec.default, spec.plugin) == (OPTIONS[0].default, "capture")
    assert registry.registry.check_options({})["recompile_limit"] == options_of({})["recompile_limit"] == 8


def test_recompile_limit_must_be_an_int_and_names_its_doc(registry):
    with pytest.raises(OptionError, match=r"option 'recompile_limit' must be int, got str '8': entries per function"):
        registry.registry.check_options({"recompile_limit": "8"})
    with pytest.raises(OptionError, match="must be int, got bool True"):
        registry.registry.check_options({"recompile_limit": True})


def test_ember_options_sets_recompile_limit_under_the_calls_options(registry):
    assert registry.registry.check_options({}, registry.config["options"])["recompile_limit"] == 3
    assert registry.registry.check_options({"recompile_limit": 5}, registry.config["options"])["recompile_limit"] == 5
