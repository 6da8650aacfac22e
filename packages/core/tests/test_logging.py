"""EMBER_LOGS and EMBER_DUMP, built on events only."""

import logging
import os

import pytest
from ember_core import Event, Graph, Input, Output, Value
from ember_core._logging import LOG_ARTIFACTS, EventLogger

VEC = Value(shape=(2,), stride=(1,))
GRAPH = Graph(name="model.fwd", inputs=(Input("x"),), outputs=(Output("x"),), values={"x": VEC})


@pytest.fixture
def records():
    """Records of the `ember` logger; its handlers, level and propagation are restored afterwards."""
    log = logging.getLogger("ember")
    saved = log.handlers[:], log.level, log.propagate
    got: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = got.append
    log.addHandler(handler)
    yield got
    log.handlers[:], log.level, log.propagate = saved


def test_chosen_artifact_is_logged_with_its_graph(records):
    logger = EventLogger()
    logger.configure("graphs", None)
    logger(Event("graph_captured", "capture", "captured 1 graph", graph=GRAPH))
    (rec,) = records
    assert rec.name == "ember.graphs" and rec.getMessage().startswith("captured 1 graph\n# ember graph v1.0")


def test_a_graph_is_printed_once_however_many_events_carry_it(records):
    logger = EventLogger()
    logger.configure("graphs", None)
    logger(Event("graph_captured", "capture", "captured", graph=GRAPH))
    logger(Event("graph_compiled", "codegen", "compiled", graph=GRAPH))
    changed = GRAPH.replace(name="model.fwd2")
    logger(Event("pass_applied", "passes", "pass", graph=changed))
    texts = [r.getMessage() for r in records]
    assert texts[1] == "compiled (graph 'model.fwd' as printed above)"
    assert texts[2].startswith("pass\n# ember graph v1.0") and texts[0].startswith("captured\n# ember graph")


def test_other_artifacts_stay_quiet(records):
    logger = EventLogger()
    logger.configure("guards", None)
    logger(Event("graph_captured", "capture", "captured"))
    assert records == []


def test_guard_source_is_logged(records):
    logger = EventLogger()
    logger.configure("guards", None)
    logger(Event("guards_built", "runtime", "2 guards", source="x.shape[0] == 4"))
    assert records[0].getMessage() == "2 guards\nx.shape[0] == 4"


def test_all_turns_on_every_artifact():
    logger = EventLogger()
    logger.configure("all", None)
    assert logger.artifacts == set(LOG_ARTIFACTS)


def test_unknown_artifact_warns_and_lists_known(caplog):
    logger = EventLogger()
    with caplog.at_level(logging.WARNING, logger="ember"):
        logger.configure("grpahs", None)
    assert "EMBER_LOGS: unknown artifact(s) grpahs; known: cache, graphs" in caplog.text
    assert logger.artifacts == set()


def test_dump_writes_numbered_text_and_json(tmp_path):
    logger = EventLogger()
    logger.configure("", str(tmp_path))
    logger(Event("graph_captured", "capture", graph=GRAPH))
    logger(Event("kernels_generated", "codegen", source="void k() {}"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["000-graph_captured-model.fwd.json", "000-graph_captured-model.fwd.txt",
                     "001-kernels_generated-codegen.src.txt"]
    assert (tmp_path / "000-graph_captured-model.fwd.txt").read_text() == str(GRAPH) + "\n"


def test_dump_skips_events_with_nothing_to_write(tmp_path):
    logger = EventLogger()
    logger.configure("", str(tmp_path / "d"))
    logger(Event("cache_hit", "runtime", "hit"))
    assert not (tmp_path / "d").exists()


def test_dump_names_are_made_safe_for_files(tmp_path):
    logger = EventLogger()
    logger.configure("", str(tmp_path))
    logger(Event("graph_captured", "capture", graph=GRAPH.replace(name="a/b c")))
    assert (tmp_path / "000-graph_captured-a_b_c.txt").is_file()


def test_dump_to_a_path_that_is_a_file_warns_once_and_goes_on(tmp_path, caplog):
    (tmp_path / "taken").write_text("a file, not a folder")
    logger = EventLogger()
    logger.configure("", str(tmp_path / "taken"))
    with caplog.at_level(logging.WARNING, logger="ember"):
        logger(Event("graph_captured", "capture", graph=GRAPH))
        logger(Event("kernels_generated", "codegen", source="void k() {}"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(tmp_path / "taken") in warnings[0].getMessage()
    assert "cannot write dumps" in warnings[0].getMessage()


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into a folder of mode 0o500")
def test_dump_to_an_unwritable_folder_warns_and_goes_on(tmp_path, caplog):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    logger = EventLogger()
    logger.configure("", str(folder))
    with caplog.at_level(logging.WARNING, logger="ember"):
        logger(Event("graph_captured", "capture", graph=GRAPH))
    assert "cannot write dumps" in caplog.text and list(folder.iterdir()) == []
