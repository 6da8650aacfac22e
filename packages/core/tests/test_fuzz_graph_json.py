"""Fuzzing the graph loader: mutated copies of the golden files end in a clean `EmberError` or a valid graph that
the oracle finds nothing wrong with, quickly, and never run code. Hypothesis drives the mutations
(`EMBER_FUZZ_EXAMPLES` sets how many; CI runs a few hundred, `nox -s fuzz` many thousands); the module ends by
printing its tally (accepted, refused, code runs, crashes, hangs, wrongly accepted)."""

import copy
import json
from pathlib import Path
from typing import Any

import ember_core as ec
import pytest
from ember_core.testing import PAYLOADS as CODE_PAYLOADS
from ember_core.testing import FuzzTally, accepted_graph_problem, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

GOLDEN = Path(__file__).parent / "golden" / "v1.0"
SEEDS = {p.stem: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("*.json"))}
TALLY = FuzzTally("graph JSON")
PAYLOADS = [
    *CODE_PAYLOADS, "s0.__class__", "aten.__class__.__init__", "aten.add.Tensor", "float32", "torch.float32", "cpu",
    "meta", "s0", "s0*2", "", "\x00", "../../etc/passwd", "backward", "tensor", "mutation",
    "1/3", "s0/2", "ToFloat(s0)", "-s0", "PowByNatural(7, 10**30)", "_inductor", "onnx", "strided", "channels_last",
    "aten.repdat.default", "aten.addmm.default", "inf", "-inf", "nan", "\x1b[31m",
]
FUZZ = fuzz_settings()

leaf = st.one_of(
    st.sampled_from(PAYLOADS), st.text(max_size=12), st.booleans(), st.none(), st.floats(allow_nan=True),
    st.integers(min_value=-2**70, max_value=2**70), st.sampled_from([-1, 0, 1, 2**63 - 1, 2**63, 2**64, 10**300]),
    st.sampled_from([1e300, 65520.0, 448.0, 1.5, 2**62]),
    st.sampled_from([(0, 2**63 - 1, 4), (10,) * 40]).map(list),  # a fresh list each time: mutations change it
)
TAGS = ["int", "sym", "ref", "list", "dtype", "float", "bool", "layout", "memory_format", "device", "x"]
json_value = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(TAGS), inner, max_size=3)), max_leaves=12)


def _containers(data: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a dict or list inside data."""
    out = [path]
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list)):
            out += _containers(v, (*path, k))
    return out


def _at(data: Any, path: tuple) -> Any:
    for k in path:
        data = data[k]
    return data


@st.composite
def mutated_document(draw) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(SEEDS)))
    data = copy.deepcopy(SEEDS[name])
    for _ in range(draw(st.integers(1, 4))):
        target = _at(data, draw(st.sampled_from(_containers(data))))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        action = draw(st.sampled_from(["replace", "delete", "add", "duplicate"] if keys else ["add"]))
        key = draw(st.sampled_from(keys)) if keys else None
        if action == "replace":
            target[key] = draw(json_value)
        elif action == "delete":
            del target[key]
        elif action == "duplicate" and isinstance(target, list):
            target.insert(key, copy.deepcopy(target[key]))
        elif isinstance(target, dict):
            target[draw(st.sampled_from([*keys, "extra", "sym"]))] = draw(json_value)
        else:
            target.append(draw(json_value))
    return name, data


@pytest.fixture(scope="module", autouse=True)
def tally(request):
    yield TALLY
    TALLY.report(request.config)


def _loaded(load: Any) -> ec.Graph:
    """The graph, verified, printed, fingerprinted and read back equal from its JSON."""
    graph = ec.verify(load())
    str(graph)
    ec.fingerprint(graph)
    assert ec.loads(ec.dumps(graph)) == graph
    return graph


def _check_clean(load: Any) -> None:
    """Loading ends in an EmberError or a graph the oracle passes; in bounded time; no code run."""
    TALLY.run(lambda: _loaded(load), accepted_graph_problem)


@FUZZ
@given(mutated_document())
def test_mutated_documents_end_cleanly(doc):
    name, data = doc
    text = json.dumps(data)
    _check_clean(lambda: ec.graph_from_json(json.loads(text), name, base_dir=GOLDEN))


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(max_size=8)),
                                                 min_size=1, max_size=6), st.booleans())
def test_mutated_bytes_end_cleanly(tmp_path_factory, name, edits, truncate):
    raw = bytearray(json.dumps(SEEDS[name]).encode())
    for pos, chunk in edits:
        pos %= len(raw) + 1
        raw[pos:pos + len(chunk)] = chunk
    if truncate:
        del raw[len(raw) // 2:]
    path = tmp_path_factory.mktemp("fuzz") / f"{name}.json"
    path.write_bytes(bytes(raw))
    _check_clean(lambda: ec.load(path))


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.sampled_from(["shape", "stride", "storage_offset"]),
       st.sampled_from(PAYLOADS))
def test_symbolic_sizes_from_payloads_end_cleanly(name, field, payload):
    data = copy.deepcopy(SEEDS[name])
    tensors = [v for v in data["values"].values() if v["type"] == "tensor" and v["shape"]]
    if not tensors:
        return
    if field == "storage_offset":
        tensors[0][field] = {"sym": payload}
    else:
        tensors[0][field][0] = {"sym": payload}
    _check_clean(lambda: ec.graph_from_json(data, name, base_dir=GOLDEN))
