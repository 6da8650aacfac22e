"""The runtime's disk cache of training graphs: for a captured graph that needs grad, its partition (the forward
and backward graphs and the saved values), so that a later process compiling the same graph skips the joint trace
and the partition, the larger part of a training graph's compile after capture. Lowering's plan cache and the
codegens' build caches then serve the two halves, each keyed by its own graph.

An entry is an `ember_core.ResultCache` entry (cache `partitions`, files `<key>.graphs`) whose facts are all that
decides the partition: the captured graph with its names (`fingerprint(graph, names=True)`: the halves keep the
graph's value names, and lowering keys plans on them), what the frontend passed as example inputs (dtype, sizes
and strides, symbolic ones as their expressions, requires_grad; plain scalars by value), the options, each stage
that ran (autograd, partitioner, post-partition passes: name, plugin, distribution and `code_version`), and the
code versions of ember-core and ember-runtime, torch and Python. A graph whose example inputs hold anything else
is compiled as before, without the disk cache.

The file is one JSON document, `{"format": "ember-partition", "version": 1, "forward": <ember-graph>,
"backward": <ember-graph>, "saved": [names], "report": {"summary", "text"}, "extra": {name: [strings]}}`. Reading
it parses both graphs with `graph_from_json`, verifies them and checks that they fit the captured graph and each
other as `ember_core.Partition` says; anything else is a `SchemaError` naming the field, and the entry is rebuilt.
"""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ember_core import (
    Graph,
    Implementation,
    Partition,
    ResultCache,
    SchemaError,
    code_version,
    facts_key,
    fingerprint,
    graph_from_json,
    graph_to_json,
    verify,
)

log = logging.getLogger("ember.cache")

FORMAT = "ember-partition"
VERSION = 1
PARTITIONS: ResultCache[Partition] = ResultCache("partitions", "graphs", "runtime", "partition")


@dataclass(frozen=True)
class StoredReport:
    """The partitioner's report as the entry kept it: its summary line and its text."""

    line: str
    text: str

    def summary(self) -> str:
        return self.line

    def __str__(self) -> str:
        return self.text


# ---------------------------------------------------------------------------------------------- facts


def partition_facts(graph: Graph, example_inputs: Sequence[Any], options_key: str,
                    stages: Sequence[Implementation]) -> dict[str, str] | None:
    """Everything that decides the partition of `graph`, as strings; None when an example input is not one the
    facts can describe (then the graph is not cached on disk)."""
    inputs = [_input_fact(x) for x in example_inputs]
    if any(fact is None for fact in inputs):
        log.debug("partition cache: graph %r has an example input of another type; not cached", graph.name)
        return None
    return {
        "format": f"{FORMAT} {VERSION}",
        "graph": fingerprint(graph, names=True),
        "inputs": facts_key({str(k): fact for k, fact in enumerate(inputs)}),
        "options": facts_key({"options": options_key}),
        "stages": "; ".join(_stage_fact(impl) for impl in stages),
        "ember": f"ember-core {code_version('ember_core')}, ember-runtime {code_version('ember_runtime')}",
        "torch": f"torch {torch.__version__}, python {platform.python_version()}",
        "torch_state": f"default dtype {torch.get_default_dtype()}, deterministic "
                       f"{torch.are_deterministic_algorithms_enabled()}",
    }


def _input_fact(x: Any) -> str | None:
    if isinstance(x, torch.Tensor):
        return (f"tensor {x.dtype} {[str(d) for d in x.shape]} {[str(s) for s in x.stride()]} "
                f"at {x.storage_offset()} {x.device} grad={x.requires_grad}")
    if isinstance(x, torch.SymInt):
        return f"symint {x.node.expr} hint {x.node.hint}"
    if x is None or type(x) in (bool, int, float, str):
        return f"{type(x).__name__} {x!r}"
    return None


def _stage_fact(impl: Implementation) -> str:
    return f"{impl.stage} {impl.name} ({impl.plugin}, {impl.dist} {impl.version}, code {code_version(impl.impl)})"


# ---------------------------------------------------------------------------------------------- writing


def encode_partition(part: Partition) -> str | None:
    """The entry's text, or None when the partition cannot be kept exactly (a value JSON cannot hold)."""
    try:
        halves = {"forward": graph_to_json(part.forward), "backward": graph_to_json(part.backward)}
        if any(graph_from_json(data) != graph for data, graph in zip(halves.values(), (part.forward, part.backward))):
            raise SchemaError("", "a graph does not come back equal from its JSON")
    except SchemaError as e:
        log.info("partition cache: the partition of %r is not stored: %s", part.forward.name, e)
        return None
    extra = {k: [str(x) for x in v] for k, v in part.extra.items()
             if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)}
    if len(extra) != len(part.extra):
        log.info("partition cache: the partition of %r is not stored: its extra facts are not lists of names",
                 part.forward.name)
        return None
    summary = getattr(part.report, "summary", None)
    report = {"summary": summary() if callable(summary) else "",
              "text": "" if part.report is None else str(part.report)}
    doc = {"format": FORMAT, "version": VERSION, **halves, "saved": list(part.saved), "report": report, "extra": extra}
    return json.dumps(doc, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------- reading


def read_partition(text: str, graph: Graph) -> Partition:
    """The partition an entry's text holds, verified and checked to fit `graph`; `SchemaError` naming the field
    otherwise."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise SchemaError("", f"not JSON ({e})") from None
    doc = _Fields(data, "")
    if doc.get("format", str) != FORMAT:
        raise SchemaError("format", f"expected {FORMAT!r}, got {data.get('format')!r}"[:200])
    version = data.get("version")
    if type(version) is not int or version != VERSION:
        raise SchemaError("version", f"entry format version {version!r} is not {VERSION}"[:200])
    forward = _half(data, "forward")
    backward = _half(data, "backward")
    saved = tuple(_names(doc.get("saved", list), "saved"))
    report = _Fields(doc.get("report", dict), "report")
    extra = {k: tuple(_names(v, f"extra.{k}")) for k, v in doc.get("extra", dict).items()}
    part = Partition(forward, backward, saved, StoredReport(report.get("summary", str), report.get("text", str)),
                     extra)
    check_fits(graph, part)
    return part


class _Fields:
    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise SchemaError(where, f"expected an object, got {type(data).__name__}")
        self.data, self.where = data, where

    def get(self, key: str, typ: type) -> Any:
        where = f"{self.where}.{key}" if self.where else key
        if key not in self.data:
            raise SchemaError(where, "missing")
        value = self.data[key]
        if not isinstance(value, typ):
            raise SchemaError(where, f"expected {typ.__name__}, got {type(value).__name__}")
        return value


def _half(data: dict, key: str) -> Graph:
    if key not in data:
        raise SchemaError(key, "missing")
    return verify(graph_from_json(data[key], key))


def _names(items: Any, where: str) -> list[str]:
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise SchemaError(where, "expected a list of names")
    return items


def check_fits(graph: Graph, part: Partition) -> None:
    """The partition's halves fit the captured graph and each other (the `ember_core.Partition` layout)."""
    fw, bw, saved = part.forward, part.backward, part.saved
    if fw.input_names != graph.input_names:
        raise SchemaError("forward.inputs", f"{list(fw.input_names)[:8]} are not the inputs of graph {graph.name!r}")
    for name in graph.input_names:
        mine, theirs = fw.values[name], graph.values[name]
        if (mine.type, mine.dtype, mine.shape, mine.stride, mine.device) != \
                (theirs.type, theirs.dtype, theirs.shape, theirs.stride, theirs.device):
            raise SchemaError(f"forward.values.{name}", f"does not match input {name!r} of graph {graph.name!r}")
    n = len(graph.outputs)
    if [o.kind for o in fw.outputs[:n]] != [o.kind for o in graph.outputs]:
        raise SchemaError("forward.outputs", f"do not begin with the {n} outputs of graph {graph.name!r}")
    if [(o.name, o.kind) for o in fw.outputs[n:]] != [(s, "saved") for s in saved]:
        raise SchemaError("forward.outputs", "do not end with the saved values")
    kinds = [(i.name, i.kind) for i in bw.inputs[:len(saved)]]
    if kinds != [(s, "saved") for s in saved] or any(i.kind != "tangent" for i in bw.inputs[len(saved):]):
        raise SchemaError("backward.inputs", "are not the saved values then the tangents")
    for k, o in enumerate(bw.outputs):
        if o.kind != "grad" or o.input is None or not 0 <= o.input < len(graph.inputs):
            raise SchemaError(f"backward.outputs[{k}]", "is not the gradient of an input")

