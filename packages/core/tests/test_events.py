"""Events: each kind belongs to one EMBER_LOGS artifact; kinds that carry stage objects carry a typed payload."""

import dataclasses
import time

import pytest
from ember_core import (
    EVENT_KINDS,
    CompiledGraph,
    Event,
    Graph,
    GraphCompiled,
    Input,
    JointGraph,
    JointTraced,
    Output,
    Partition,
    Partitioned,
    Reused,
    Stopwatch,
    Value,
)
from ember_core.events._events import ARTIFACTS


def test_known_kinds_map_to_their_artifact():
    assert Event("guard_failed", "runtime").artifact == "guards"  # the recompile it causes logs under recompiles
    assert Event("kernels_generated", "codegen").artifact == "kernels"


def test_unknown_kind_is_its_own_artifact():
    assert Event("my_plugin_thing", "pass").artifact == "my_plugin_thing"


def test_every_artifact_is_a_documented_log_name():
    assert set(ARTIFACTS.values()) == {"graphs", "joint", "partition", "kernels", "guards", "recompiles", "cache",
                                       "compiled_autograd", "autotune"}


def test_events_default_to_no_payload():
    e = Event("graph_cache_hit", "runtime")
    assert (e.message, e.graph, e.source, e.data) == ("", None, None, {})


# ---------------------------------------------------------------------------------------------- typed payloads

VEC = Value(shape=(2,), stride=(1,))
GRAPH = Graph(name="g", inputs=(Input("x"),), outputs=(Output("x"),), values={"x": VEC})
JOINT = JointGraph(GRAPH, num_primals=1, num_forward_outputs=1)
PART = Partition(GRAPH, GRAPH.replace(name="g_bw"), ("x",), report="1 saved value")


def test_every_kind_is_documented_with_its_artifact_and_meaning():
    for name, kind in EVENT_KINDS.items():
        assert kind.name == name and kind.meaning and ARTIFACTS[name] == kind.artifact


def test_kinds_that_carry_stage_objects_name_their_payload_type():
    payloads = {name: k.payload for name, k in EVENT_KINDS.items() if k.payload is not None}
    assert payloads == {"joint_traced": JointTraced, "partitioned": Partitioned, "graph_compiled": GraphCompiled,
                        "disk_cache_hit": Reused}


def test_partitioned_payload_reads_the_partition_through_named_fields():
    e = Event("partitioned", "partition", graph=PART.forward, payload=Partitioned(JOINT, PART, "mincut"))
    p = e.payload
    assert (p.joint, p.partition, p.partitioner) == (JOINT, PART, "mincut")
    assert (p.forward, p.backward, p.saved, p.report) == (GRAPH, PART.backward, ("x",), "1 saved value")


def test_get_reads_payload_fields_then_simple_data():
    e = Event("partitioned", "partition", data={"note": 1}, payload=Partitioned(JOINT, PART, "mincut"))
    assert e.get("joint") is JOINT and e.get("report") == "1 saved value" and e.get("note") == 1
    assert e.get("missing", "none") == "none"
    assert Event("fallback", "capture", data={"reason": "why"}).get("reason") == "why"


def test_a_payload_of_the_wrong_type_is_refused_naming_the_kind():
    with pytest.raises(TypeError, match="event 'partitioned' carries a Partitioned payload, got JointTraced"):
        Event("partitioned", "partition", payload=JointTraced(JOINT, GRAPH, "aot"))


def test_unknown_kinds_may_carry_any_payload():
    assert Event("my_plugin_thing", "pass", payload={"anything": 1}).get("anything") is None


def test_graph_compiled_payload_names_the_codegen():
    compiled = CompiledGraph(lambda xs: xs, GRAPH, "interpreter", "src")
    assert GraphCompiled(compiled).codegen == "interpreter"


def test_payloads_are_frozen():
    payload = JointTraced(JOINT, GRAPH, "aot")
    with pytest.raises(dataclasses.FrozenInstanceError):
        payload.autograd = "other"


def test_a_stopwatch_times_its_block_and_then_stands_still():
    with Stopwatch() as clock:
        time.sleep(0.01)
        inside = clock.seconds
    done = clock.seconds
    time.sleep(0.01)
    assert 0.01 <= inside <= done == clock.seconds


def test_a_stopwatch_runs_from_its_creation_when_not_used_as_a_block():
    clock = Stopwatch()
    time.sleep(0.01)
    assert clock.seconds >= 0.01
