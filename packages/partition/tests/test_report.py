"""`PartitionReport`: text, totals, and the `partitioned` event."""

import ember_core
import pytest
from ember_partition import MinCutPartitioner, PartitionReport, RecomputedOp, SavedValue


def sample_report() -> PartitionReport:
    saved = (SavedValue("x", "float32", (8, 16), 512, "input"), SavedValue("h", "float32", ("s0", 32), 1024),
             SavedValue("m", "bool", (8, 32), 256))
    recomputed = (RecomputedOp(("g",), "aten.gelu.default", 256), RecomputedOp(("t",), "aten.t.default", 0))
    return PartitionReport("mincut", saved, recomputed, 1.0, ("a note",))


def test_totals_count_activations_only():
    report = sample_report()
    assert report.saved_bytes == 1280
    assert report.recompute_flops == 256


def test_text_lists_saved_values_recomputed_ops_and_notes():
    assert str(sample_report()) == "\n".join([
        "mincut (memory budget 1): saved 3 values, 1,280 bytes of activations; recomputed 2 ops, ~256 FLOPs",
        "  saved x       float32[8, 16]     input, free",
        "  saved h       float32[s0, 32]    1,024 B",
        "  saved m       bool[8, 32]        256 B",
        "  recomputed g  aten.gelu.default  ~256 FLOPs",
        "  recomputed for free (views, sizes): t",
        "  note: a note",
    ])


def test_report_of_a_partition_has_real_sizes(block):
    report = MinCutPartitioner().partition(block("gelu_mlp").joint).report
    activations = [(s.name, s.shape, s.nbytes, s.kind) for s in report.saved if not s.free]
    assert activations == [("addmm", (8, 32), 1024, "activation")]
    assert {s.kind for s in report.saved if s.free} == {"input"}


class Observer:
    def __init__(self):
        self.events = []

    @ember_core.hookimpl
    def ember_event(self, event):
        self.events.append(event)


@pytest.fixture
def observer():
    ember_core.reset_plugin_manager()
    seen = Observer()
    ember_core.get_plugin_manager().register(seen, "test-observer")
    yield seen
    ember_core.reset_plugin_manager()
