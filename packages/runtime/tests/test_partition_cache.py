"""The disk cache of partitions: a training graph compiled again in a later process (here: after the in-process
cache is cleared) takes its forward and backward graphs from disk, without a joint trace or a partition; an entry
that is not exactly right is refused naming the field, and rebuilt."""

from __future__ import annotations

import json

import pytest
import torch

# A training compile needs an autograd and a partition plugin: the runtime's own test session installs neither
# (ember-runtime depends on ember-core alone), so these run where they are installed (the dev environment); the
# integration tests (tests/test_disk_cache.py) cover the same cache across real processes in CI.
pytest.importorskip("ember_autograd", reason="needs an autograd plugin (ember-autograd)")
pytest.importorskip("ember_partition", reason="needs a partitioner plugin (ember-partition)")

from ember_core import GraphError, SchemaError, facts_key
from ember_runtime import clear_cache, compile, record_events
from ember_runtime._partition_cache import (
    PARTITIONS,
    encode_partition,
    partition_facts,
    read_partition,
)

OPTIONS = {"frontend": "toy", "codegen.cpu": "interpreter"}


def f(x, w):
    return (x @ w).tanh() * 2


def inputs():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)


def step(options=OPTIONS, grad=True) -> tuple[list, torch.Tensor]:
    """A training step compiled afresh in this process (no in-process hit); its events and w's gradient."""
    clear_cache()
    x, w = inputs()
    w.requires_grad_(grad)
    with record_events() as rec:
        out = compile(f, options=options)(x, w)
        if grad:
            out.sum().backward()
    return rec.events, w.grad


def kinds(events, *wanted) -> list[str]:
    return [e.kind for e in events if e.kind in wanted]


def eager_grad() -> torch.Tensor:
    x, w = inputs()
    f(x, w).sum().backward()
    return w.grad


def split():
    """The captured graph and its partition, from a compile's events."""
    events, _ = step()
    (traced,) = [e for e in events if e.kind == "joint_traced"]
    (parted,) = [e for e in events if e.kind == "partitioned"]
    return traced.payload.graph, parted.payload.partition


def test_a_second_compile_takes_the_partition_from_disk(toy):
    first, grad = step()
    assert kinds(first, "disk_cache_miss", "joint_traced", "partitioned") == ["disk_cache_miss", "joint_traced",
                                                                              "partitioned"]
    second, warm_grad = step()
    assert kinds(second, "disk_cache_hit", "disk_cache_miss", "joint_traced", "partitioned") == ["disk_cache_hit"]
    (hit,) = [e for e in second if e.kind == "disk_cache_hit"]
    assert hit.stage == "runtime" and hit.data["cache"] == "partitions"
    torch.testing.assert_close(grad, eager_grad())
    torch.testing.assert_close(warm_grad, eager_grad())


def test_other_options_miss(toy):
    step()
    events, _ = step({**OPTIONS, "partition": "default"})
    assert kinds(events, "disk_cache_hit", "disk_cache_miss") == ["disk_cache_miss"]


def test_cache_off_neither_reads_nor_stores(toy):
    events, grad = step({**OPTIONS, "cache": False})
    assert not kinds(events, "disk_cache_hit", "disk_cache_miss")
    torch.testing.assert_close(grad, eager_grad())
    assert kinds(step()[0], "disk_cache_hit", "disk_cache_miss") == ["disk_cache_miss"]


def test_inference_does_not_use_it(toy):
    events, _ = step(grad=False)
    assert not [e for e in events if e.stage == "runtime" and e.kind.startswith("disk_cache")]


def test_a_partition_reads_back_equal(toy):
    graph, part = split()
    back = read_partition(encode_partition(part), graph)
    assert (back.forward, back.backward, back.saved, back.extra) == (part.forward, part.backward, part.saved,
                                                                     part.extra)
    assert back.report.summary() == part.report.summary() and str(back.report) == str(part.report)


def document(part) -> dict:
    return json.loads(encode_partition(part))


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(version=2), "version: entry format version 2 is not 1"),
    (lambda d: d.update(version="1"), "version: entry format version '1' is not 1"),
    (lambda d: d.update(format="ember-graph"), "format: expected 'ember-partition'"),
    (lambda d: d.pop("saved"), "saved: missing"),
    (lambda d: d.update(saved=[1, 2]), "saved: expected a list of names"),
    (lambda d: d["report"].pop("text"), "report.text: missing"),
    (lambda d: d["forward"]["nodes"][0].update(op="aten.no_such_op.default"), "forward"),
    (lambda d: d["backward"].update(version=[99, 0]), "backward: version: schema version 99.0 is not supported"),
    (lambda d: d["forward"]["inputs"].reverse(), "forward.inputs: "),
    (lambda d: d["forward"]["outputs"].pop(), "forward.outputs: do not end with the saved values"),
])
def test_a_bad_document_is_refused_naming_the_field(toy, change, field):
    graph, part = split()
    data = document(part)
    change(data)
    with pytest.raises((SchemaError, GraphError)) as info:
        read_partition(json.dumps(data), graph)
    assert field in str(info.value)


def test_the_partition_of_another_graph_is_refused(toy):
    graph, part = split()
    other = graph.replace(inputs=graph.inputs[::-1])
    with pytest.raises(SchemaError, match="forward.inputs: .* are not the inputs of graph"):
        read_partition(encode_partition(part), other)


def test_a_partition_with_extra_facts_json_cannot_hold_is_not_stored(toy):
    _, part = split()
    assert encode_partition(part.__class__(part.forward, part.backward, part.saved, None, {"x": object()})) is None


def test_flipped_bytes_in_an_entry_are_rebuilt(toy):
    step()
    key = next(p for p in PARTITIONS.disk.directory.iterdir() if p.suffix == ".graphs")
    data = bytearray(key.read_bytes())
    data[len(data) // 3] ^= 0x01
    key.write_bytes(bytes(data))
    events, grad = step()
    (miss,) = [e for e in events if e.kind == "disk_cache_miss" and e.stage == "runtime"]
    assert "does not match its recorded sha256" in miss.data["reason"] and kinds(events, "joint_traced")
    torch.testing.assert_close(grad, eager_grad())
    assert kinds(step()[0], "disk_cache_hit", "joint_traced") == ["disk_cache_hit"]


def test_facts_tell_apart_what_changes_the_partition(toy):
    graph, _ = split()
    x, w = inputs()
    base = partition_facts(graph, [x, w], "options", [])
    assert partition_facts(graph, [x, w], "options", []) == base
    assert partition_facts(graph, [x, w.detach()], "options", []) != base
    assert partition_facts(graph, [x.double(), w], "options", []) != base
    assert partition_facts(graph, [x, w], "other options", []) != base
    assert partition_facts(graph.replace(name="other"), [x, w], "options", []) != base
    assert partition_facts(graph, [x, 2.0], "options", []) != partition_facts(graph, [x, 3.0], "options", [])
    assert partition_facts(graph, [x, object()], "options", []) is None
    assert all(isinstance(v, str) for v in base.values()) and len(facts_key(base)) == 64
