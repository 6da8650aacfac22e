"""The plugin: partitioners `default` and `mincut` and the option `partition.memory_budget`, by entry point."""

import importlib.metadata
import logging

import pytest
from ember_core import Event, OptionError, Partitioned, PluginManager, Reused
from ember_partition import DefaultPartitioner, MinCutPartitioner
from ember_partition import _plugin as plugin
from ember_partition._diagram import COLOURS, joint_diagram, partition_diagram


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


def test_partitioned_events_become_diagrams_in_the_dump_folder(block, tmp_path):
    joint = block("cos_cos").joint
    part = MinCutPartitioner().partition(joint)
    manager = PluginManager(load_entrypoints=False, env={"EMBER_DUMP": str(tmp_path)})
    manager.register(plugin, "partition")
    manager.emit(Event("partitioned", "partition", graph=part.forward, payload=Partitioned(joint, part, "mincut")))
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written[0] == f"000-partitioned-{part.forward.name}.dot"
    assert (tmp_path / written[0]).read_text() == joint_diagram(joint, part)
    assert set(written) <= {written[0], written[0].replace(".dot", ".svg")}


def test_a_partition_reused_from_the_disk_cache_is_drawn_from_its_halves(block, tmp_path):
    joint = block("layernorm_attention").joint
    part = MinCutPartitioner().partition(joint)
    manager = PluginManager(load_entrypoints=False, env={"EMBER_DUMP": str(tmp_path)})
    manager.register(plugin, "partition")
    manager.emit(Event("disk_cache_hit", "runtime", graph=part.forward, payload=Reused(part),
                       data={"cache": "partitions", "origin": "redis://cache-host:6379/0"}))
    manager.emit(Event("disk_cache_hit", "lowering", graph=part.forward, payload=Reused("a plan, not a partition")))
    dot = tmp_path / f"000-disk_cache_hit-{part.forward.name}.dot"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".dot") == [dot.name]
    text = dot.read_text()
    assert text == partition_diagram(part, "partition from the remote cache redis://cache-host:6379/0 (warm start: "
                                           "no joint graph traced)")
    assert text.count(" [fillcolor=") == len(part.forward.nodes) + len(part.backward.nodes)
    assert text.count("shape=ellipse") == len(part.forward.inputs) + len(
        [i for i in part.backward.inputs if i.kind != "saved"])
    for role in ("forward", "backward", "saved", "primal", "tangent"):
        assert f'fillcolor="{COLOURS[role]}"' in text, role
    for name in part.saved:  # each saved value's node feeds a backward node
        producer = next(f"f{i}" for i, n in enumerate(part.forward.nodes) if name in n.outputs) if name not in \
            part.forward.input_names else f"i{part.forward.input_names.index(name)}"
        assert f"  {producer} -> b" in text, name


def test_without_a_dump_folder_no_diagram_is_written(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manager = PluginManager(load_entrypoints=False, env={})
    manager.register(plugin, "partition")
    joint = block("cos_cos").joint
    part = MinCutPartitioner().partition(joint)
    manager.emit(Event("partitioned", "partition", graph=part.forward, payload=Partitioned(joint, part, "mincut")))
    assert list(tmp_path.iterdir()) == []


def test_a_dump_folder_that_cannot_be_written_warns_once_and_goes_on(block, tmp_path, caplog):
    (tmp_path / "taken").write_text("a file, not a folder")
    joint = block("cos_cos").joint
    part = MinCutPartitioner().partition(joint)
    manager = PluginManager(load_entrypoints=False, env={"EMBER_DUMP": str(tmp_path / "taken")})
    manager.register(plugin, "partition")
    event = Event("partitioned", "partition", graph=part.forward, payload=Partitioned(joint, part, "mincut"))
    with caplog.at_level(logging.WARNING, logger="ember"):
        manager.emit(event)
        manager.emit(event)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(tmp_path / "taken") in warnings[0] and "cannot write dumps" in warnings[0]
