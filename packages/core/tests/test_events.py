"""Events: each kind belongs to one EMBER_LOGS artifact."""

from ember_core import Event
from ember_core._events import ARTIFACTS


def test_known_kinds_map_to_their_artifact():
    assert Event("guard_failed", "runtime").artifact == "recompiles"
    assert Event("kernels_generated", "codegen").artifact == "kernels"


def test_unknown_kind_is_its_own_artifact():
    assert Event("my_plugin_thing", "pass").artifact == "my_plugin_thing"


def test_every_artifact_is_a_documented_log_name():
    assert set(ARTIFACTS.values()) == {"graphs", "joint", "partition", "kernels", "guards", "recompiles", "cache"}


def test_events_default_to_no_payload():
    e = Event("cache_hit", "runtime")
    assert (e.message, e.graph, e.source, e.data) == ("", None, None, {})
