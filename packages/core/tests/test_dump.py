"""EMBER_DUMP: one writer, one numbering per event for every observer's files, a failed folder warned once."""

import logging
import os

import pytest
from ember_core import DumpWriter, Event, Graph, Input, Output, PluginManager, Value, hookimpl

VEC = Value(shape=(2,), stride=(1,))
GRAPH = Graph(name="model.fwd", inputs=(Input("x"),), outputs=(Output("x"),), values={"x": VEC})


def test_event_files_are_numbered_text_and_json(tmp_path):
    dump = DumpWriter(tmp_path)
    dump.write_event(Event("graph_captured", "capture", graph=GRAPH))
    dump.write_event(Event("kernels_generated", "codegen", source="void k() {}"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["000-graph_captured-model.fwd.json", "000-graph_captured-model.fwd.txt",
                     "001-kernels_generated-codegen.src.txt"]
    assert (tmp_path / "000-graph_captured-model.fwd.txt").read_text() == str(GRAPH) + "\n"


def test_events_with_nothing_to_write_take_no_number(tmp_path):
    dump = DumpWriter(tmp_path / "d")
    assert dump.write_event(Event("graph_cache_hit", "runtime", "hit")) == []
    assert not (tmp_path / "d").exists()
    dump.write_event(Event("graph_captured", "capture", graph=GRAPH))
    assert (tmp_path / "d" / "000-graph_captured-model.fwd.txt").is_file()


def test_an_extra_artifact_shares_its_events_number(tmp_path):
    dump = DumpWriter(tmp_path)
    first, second = Event("partitioned", "partition", graph=GRAPH), Event("graph_compiled", "codegen", graph=GRAPH)
    assert dump.write(first, ".dot", "digraph {}") == tmp_path / "000-partitioned-model.fwd.dot"
    dump.write_event(first)
    dump.write_event(second)
    assert dump.write(second, ".svg", b"<svg/>") == tmp_path / "001-graph_compiled-model.fwd.svg"
    assert (tmp_path / "000-partitioned-model.fwd.txt").is_file()
    assert (tmp_path / "001-graph_compiled-model.fwd.svg").read_bytes() == b"<svg/>"


def test_equal_events_still_get_their_own_numbers(tmp_path):
    dump = DumpWriter(tmp_path)
    a, b = Event("graph_captured", "capture", graph=GRAPH), Event("graph_captured", "capture", graph=GRAPH)
    first, second = "000-graph_captured-model.fwd", "001-graph_captured-model.fwd"
    assert (dump.stem(a), dump.stem(b), dump.stem(a)) == (first, second, first)


def test_without_a_folder_nothing_is_written():
    dump = DumpWriter(None)
    assert not dump.enabled
    assert dump.write(Event("partitioned", "partition"), ".dot", "digraph {}") is None
    assert dump.write_event(Event("graph_captured", "capture", graph=GRAPH)) == []


def test_a_suffix_cannot_leave_the_folder(tmp_path):
    with pytest.raises(ValueError, match="dump suffix '/../x' must be letters"):
        DumpWriter(tmp_path).write(Event("partitioned", "partition"), "/../x", "text")


def test_names_are_made_safe_for_files(tmp_path):
    DumpWriter(tmp_path).write_event(Event("graph_captured", "capture", graph=GRAPH.replace(name="a/b c")))
    assert (tmp_path / "000-graph_captured-a_b_c.txt").is_file()


def test_a_path_that_is_a_file_warns_once_and_goes_on(tmp_path, caplog):
    (tmp_path / "taken").write_text("a file, not a folder")
    dump = DumpWriter(tmp_path / "taken")
    with caplog.at_level(logging.WARNING, logger="ember"):
        assert dump.write_event(Event("graph_captured", "capture", graph=GRAPH)) == []
        assert dump.write(Event("partitioned", "partition"), ".dot", "digraph {}") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(tmp_path / "taken") in warnings[0].getMessage()
    assert "cannot write dumps" in warnings[0].getMessage()


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into a folder of mode 0o500")
def test_an_unwritable_folder_warns_and_goes_on(tmp_path, caplog):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    with caplog.at_level(logging.WARNING, logger="ember"):
        DumpWriter(folder).write_event(Event("graph_captured", "capture", graph=GRAPH))
    assert "cannot write dumps" in caplog.text and list(folder.iterdir()) == []


class DiagramObserver:
    """A plugin that writes one extra file per event through the writer the hook hands it."""

    @hookimpl
    def ember_event(self, event, dump):
        dump.write(event, ".dot", "digraph {}")


class PlainObserver:
    def __init__(self):
        self.kinds = []

    @hookimpl
    def ember_event(self, event):
        self.kinds.append(event.kind)


def test_observers_get_the_managers_writer_only_when_they_ask_for_it(tmp_path):
    pm = PluginManager(load_entrypoints=False, env={"EMBER_DUMP": str(tmp_path)})
    plain = PlainObserver()
    pm.register(DiagramObserver(), name="diagrams")
    pm.register(plain, name="plain")
    pm.emit(Event("partitioned", "partition", graph=GRAPH))
    assert plain.kinds == ["partitioned"] and pm.dump.folder == tmp_path
    assert [p.name for p in tmp_path.iterdir()] == ["000-partitioned-model.fwd.dot"]


def test_the_builtin_observer_and_a_plugin_share_one_number(tmp_path):
    from ember_core import _builtin

    pm = PluginManager(load_entrypoints=False, env={"EMBER_DUMP": str(tmp_path)})
    pm.register(DiagramObserver(), name="diagrams")
    pm.register(_builtin, name="core")
    pm.emit(Event("partitioned", "partition", graph=GRAPH))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "000-partitioned-model.fwd.dot", "000-partitioned-model.fwd.json", "000-partitioned-model.fwd.txt"]
