"""EMBER_LOGS, built on events only."""

import logging

import pytest
from ember_core import Event, Graph, Input, Output, Value
from ember_core.events._logging import LOG_ARTIFACTS, EventLogger

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
    logger.configure("graphs")
    logger(Event("graph_captured", "capture", "captured 1 graph", graph=GRAPH))
    (rec,) = records
    assert rec.name == "ember.graphs" and rec.getMessage().startswith("captured 1 graph\n# ember graph v1.2")


def test_a_graph_is_printed_once_however_many_events_carry_it(records):
    logger = EventLogger()
    logger.configure("graphs")
    logger(Event("graph_captured", "capture", "captured", graph=GRAPH))
    logger(Event("graph_compiled", "codegen", "compiled", graph=GRAPH))
    changed = GRAPH.replace(name="model.fwd2")
    logger(Event("pass_applied", "passes", "pass", graph=changed))
    texts = [r.getMessage() for r in records]
    assert texts[1] == "compiled (graph 'model.fwd' as printed above)"
    assert texts[2].startswith("pass\n# ember graph v1.2") and texts[0].startswith("captured\n# ember graph")


def test_other_artifacts_stay_quiet(records):
    logger = EventLogger()
    logger.configure("guards")
    logger(Event("graph_captured", "capture", "captured"))
    assert records == []


def test_guard_source_is_logged(records):
    logger = EventLogger()
    logger.configure("guards")
    logger(Event("guards_built", "runtime", "2 guards", source="x.shape[0] == 4"))
    assert records[0].getMessage() == "2 guards\nx.shape[0] == 4"


def test_all_turns_on_every_artifact():
    logger = EventLogger()
    logger.configure("all")
    assert logger.artifacts == set(LOG_ARTIFACTS)


def test_unknown_artifact_warns_and_lists_known(caplog):
    logger = EventLogger()
    with caplog.at_level(logging.WARNING, logger="ember"):
        logger.configure("grpahs")
    assert "EMBER_LOGS: unknown artifact(s) grpahs; known: autotune, cache, compiled_autograd, graphs" in caplog.text
    assert logger.artifacts == set()
