"""Golden files: every file of every released schema version loads, verifies, runs and round-trips.

tests/golden/v<major>.<minor>/ holds files written by that version (see golden/make_golden.py). They are never
rewritten: a later ember-core that cannot read them has broken the schema's promise.
"""

import json
from pathlib import Path

import ember_core as ec
import jsonschema
import pytest
from ember_core.graph._symbolic import evaluate
from ember_core.testing import random_inputs

GOLDEN = Path(__file__).parent / "golden"
FILES = sorted(GOLDEN.glob("v*/*.json"))


def _version(path: Path) -> tuple[int, int]:
    major, minor = path.parent.name.removeprefix("v").split(".")
    return int(major), int(minor)


def test_current_version_has_golden_files():
    major, minor = ec.SCHEMA_VERSION
    assert list((GOLDEN / f"v{major}.{minor}").glob("*.json")), (
        f"no golden files for schema {major}.{minor}: run packages/core/tests/golden/make_golden.py"
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_file_loads_and_verifies(path):
    ec.verify(ec.load(path))


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_file_round_trips(path, tmp_path):
    graph = ec.load(path)
    again = ec.load(ec.save(graph, tmp_path / path.name))
    assert again == graph
    if _version(path) == ec.SCHEMA_VERSION:  # written by this version: byte-for-byte the same document
        assert json.loads((tmp_path / path.name).read_text()) == json.loads(path.read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_file_of_this_major_follows_the_json_schema(path):
    if _version(path)[0] != ec.SCHEMA_VERSION[0]:
        pytest.skip("another major version")
    jsonschema.Draft202012Validator(ec.json_schema()).validate(json.loads(path.read_text()))


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_graph_runs_with_the_shapes_it_declares(path):
    graph = ec.load(path)
    hints = {s.name: s.hint for s in graph.symbols}
    outputs = ec.interpret(graph, random_inputs(graph))
    for out, result in zip(graph.outputs, outputs):
        value = graph.values[out.name]
        if value.type == "tensor":
            assert list(result.shape) == [evaluate(d, hints) for d in value.shape], out.name
            assert ec.dtype_name(result.dtype) == value.dtype, out.name
