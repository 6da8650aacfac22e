"""The plugin: partitioners `default` and `mincut` and the option `partition.memory_budget`, by entry point."""

import importlib.metadata

import pytest
from ember_core import OptionError, PluginManager
from ember_partition import DefaultPartitioner, MinCutPartitioner
from ember_partition import _plugin as plugin


@pytest.fixture
def registry():
    manager = PluginManager(load_entrypoints=False, env={})
    manager.register(plugin, "partition")
    return manager.registry


def test_both_partitioners_are_registered_mincut_first(registry):
    assert isinstance(registry.find("partition").impl, MinCutPartitioner)
    assert isinstance(registry.find("partition", "default").impl, DefaultPartitioner)
    assert [i.name for i in registry.all("partition")] == ["mincut", "default"]


def test_memory_budget_option_defaults_to_one(registry):
    assert registry.check_options({})["partition.memory_budget"] == 1.0
    assert registry.check_options({"partition.memory_budget": 0.25})["partition.memory_budget"] == 0.25
    with pytest.raises(OptionError, match="partition.memory_budget"):
        registry.check_options({"partition.memory_budget": "low"})


def test_plugin_is_found_by_entry_point():
    eps = importlib.metadata.entry_points(group="ember", name="partition")
    assert [ep.value for ep in eps] == ["ember_partition._plugin"]


def test_partitioners_take_the_checked_options(registry, block):
    options = registry.check_options({"partition.memory_budget": 0.5})
    part = registry.find("partition").impl.partition(block("layernorm_attention").joint, options)
    assert part.report.memory_budget == 0.5
