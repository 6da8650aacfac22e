"""ember-graph JSON documents: exact round trips, the shipped JSON Schema, and errors that name the bad field."""

import copy
import json
import math

import ember_core as ec
import jsonschema
import pytest
import torch
from ember_core import Constant, Graph, Input, Node, Output, Ref, SchemaError, Sym, Value
from ember_core.graph._dtypes import DTYPE_NAMES
from ember_core.graph._json_args import ARG_TAGS, decode_arg, encode_arg
from ember_core.graph._schema import INPUT_KINDS, OUTPUT_KINDS, VALUE_TYPES
from ember_core.testing import battery_case, battery_names

VALIDATOR = jsonschema.Draft202012Validator(ec.json_schema())


def small_graph() -> Graph:
    vec = Value(shape=(4,), stride=(1,))
    return Graph(
        name="small",
        inputs=(Input("x"), Input("y")),
        nodes=(Node(("a",), "aten.add.Tensor", (Ref("x"), Ref("y"))), Node(("b",), "aten.mul.Tensor", (Ref("a"), 2.0))),
        outputs=(Output("b"),),
        values={"x": vec, "y": vec, "a": vec, "b": vec},
    )


def graph_with_constant(tensor: torch.Tensor) -> Graph:
    vec = Value(dtype=ec.dtype_name(tensor.dtype), shape=tuple(tensor.shape), stride=tuple(tensor.stride()))
    return Graph(
        name="const",
        inputs=(Input("x"),),
        nodes=(Node(("y",), "aten.add.Tensor", (Ref("x"), Ref("c"))),),
        outputs=(Output("y"),),
        values={"x": vec, "y": vec},
        constants={"c": Constant("c", tensor)},
    )


# ---------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", battery_names())
def test_battery_graph_round_trips_through_json_text(name):
    graph = battery_case(name).graph
    assert ec.loads(ec.dumps(graph)) == graph


@pytest.mark.parametrize("name", battery_names())
def test_battery_graph_json_follows_the_json_schema(name):
    VALIDATOR.validate(ec.graph_to_json(battery_case(name).graph))


@pytest.mark.parametrize("name", battery_names())
def test_battery_graph_round_trips_through_a_file(name, tmp_path):
    graph = battery_case(name).graph
    assert ec.load(ec.save(graph, tmp_path / "g.json")) == graph


ARGS = [
    Ref("v1"), Sym("2*s0"), None, True, False, 0, -3, 2**40, 1.5, -0.0, float("inf"), float("-inf"), "floor",
    (1, (Ref("a"), None), ()), torch.float16, torch.bool, torch.device("cpu"), torch.strided, torch.contiguous_format,
]


@pytest.mark.parametrize("arg", ARGS, ids=repr)
def test_argument_round_trips_through_its_tag(arg):
    data = json.loads(json.dumps(encode_arg(arg)))
    VALIDATOR.evolve(schema={"$ref": "#/$defs/arg", **{"$defs": ec.json_schema()["$defs"]}}).validate(data)
    back = decode_arg(data)
    assert back == arg and type(back) is type(arg)


def test_nan_argument_round_trips():
    assert math.isnan(decode_arg(json.loads(json.dumps(encode_arg(float("nan"))))))


def test_lists_decode_as_tuples():
    assert decode_arg(encode_arg([1, 2])) == (1, 2)


def test_unencodable_argument_names_its_type():
    with pytest.raises(SchemaError, match="cannot encode argument .* of type complex"):
        encode_arg(1 + 2j)


# ---------------------------------------------------------------------------------------------- constants


def test_small_constants_travel_inline():
    data = ec.graph_to_json(graph_with_constant(torch.arange(4.0)))
    assert data["constants"]["c"]["data"] == [{"float": float(i)} for i in range(4)]


def test_large_constants_go_to_a_side_file(tmp_path):
    graph = graph_with_constant(torch.randn(10, 10))
    path = ec.save(graph, tmp_path / "big.json")
    entry = json.loads(path.read_text())["constants"]["c"]
    assert entry == {"dtype": "float32", "shape": [10, 10], "file": "big.data/c.pt"}
    assert (tmp_path / "big.data" / "c.pt").is_file()
    assert ec.load(path) == graph


def test_dumps_keeps_large_constants_inline():
    graph = graph_with_constant(torch.randn(10, 10))
    assert ec.loads(ec.dumps(graph)) == graph


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool, torch.uint8])
def test_inline_constants_keep_dtype_and_exact_values(dtype):
    tensor = (torch.randn(2, 3) * 10).to(dtype)
    assert ec.loads(ec.dumps(graph_with_constant(tensor))) == graph_with_constant(tensor)


def test_side_file_outside_the_graph_folder_is_refused(tmp_path):
    path = ec.save(graph_with_constant(torch.randn(10, 10)), tmp_path / "big.json")
    data = json.loads(path.read_text())
    data["constants"]["c"]["file"] = "../elsewhere.pt"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=r"constants\.c\.file: side file '../elsewhere.pt' lies outside"):
        ec.load(path)


def test_missing_side_file_names_the_constant(tmp_path):
    path = ec.save(graph_with_constant(torch.randn(10, 10)), tmp_path / "big.json")
    (tmp_path / "big.data" / "c.pt").unlink()
    with pytest.raises(SchemaError, match=r"constants\.c\.file: cannot read side file"):
        ec.load(path)


def test_side_file_needs_a_graph_loaded_from_a_file(tmp_path):
    path = ec.save(graph_with_constant(torch.randn(10, 10)), tmp_path / "big.json")
    with pytest.raises(SchemaError, match="not loaded from a file"):
        ec.loads(path.read_text())


def test_constant_data_of_the_wrong_kind_names_the_constant():
    data = ec.graph_to_json(graph_with_constant(torch.arange(4.0)))
    data["constants"]["c"]["data"][1] = {"str": "x"}
    with pytest.raises(SchemaError, match=r"constants\.c\.data: not a list of float32 numbers"):
        ec.graph_from_json(data)


def test_save_leaves_no_temporary_file(tmp_path):
    ec.save(small_graph(), tmp_path / "g.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]


# ---------------------------------------------------------------------------------------------- versions


def test_newer_minor_with_unknown_fields_loads_ignoring_them():
    data = ec.graph_to_json(small_graph())
    data["version"] = [1, 99]
    data["future_top"] = {"anything": 1}
    data["nodes"][0]["future_node_field"] = [1, 2]
    data["values"]["x"]["future_value_field"] = "z"
    data["inputs"][0]["future_input_field"] = True
    assert ec.graph_from_json(data) == small_graph()


def test_unknown_fields_of_the_current_minor_are_refused_by_name():
    data = ec.graph_to_json(small_graph())
    data["nodes"][1]["colour"] = "red"
    with pytest.raises(SchemaError, match=r"nodes\[1\]: unknown field\(s\) 'colour'"):
        ec.graph_from_json(data)


def test_future_major_version_is_refused_naming_the_version():
    data = ec.graph_to_json(small_graph())
    data["version"] = [2, 0]
    with pytest.raises(SchemaError, match=r"version: schema version 2\.0 is not supported.*reads 1\.x"):
        ec.graph_from_json(data)


@pytest.mark.parametrize("version", [None, "1.0", [1], [1, "0"], [1, 0, 0]])
def test_malformed_version_is_refused(version):
    data = ec.graph_to_json(small_graph())
    data["version"] = version
    with pytest.raises(SchemaError, match=r"version: expected \[major, minor\]"):
        ec.graph_from_json(data)


# ---------------------------------------------------------------------------------------------- bad input


def test_truncated_file_names_the_file_and_position(tmp_path):
    path = ec.save(small_graph(), tmp_path / "g.json")
    path.write_text(path.read_text()[:200])
    with pytest.raises(SchemaError, match=r"g\.json: not valid JSON \(line \d+, column \d+"):
        ec.load(path)


def test_corrupt_json_text_is_a_schema_error():
    with pytest.raises(SchemaError, match=r"^graph\.json: not valid JSON \(line 1, column 2"):
        ec.loads("{oops", where="graph.json")


def test_missing_file_is_a_schema_error(tmp_path):
    with pytest.raises(SchemaError, match="cannot read graph file"):
        ec.load(tmp_path / "absent.json")


def test_wrong_argument_type_names_its_path():
    data = ec.graph_to_json(small_graph())
    data["nodes"][1]["args"][0] = {"ref": 3}
    with pytest.raises(SchemaError, match=r"^nodes\[1\]\.args\[0\]: expected str, got int 3"):
        ec.graph_from_json(data)


def test_wrong_field_type_in_a_file_names_file_and_path(tmp_path):
    path = ec.save(small_graph(), tmp_path / "g.json")
    data = json.loads(path.read_text())
    data["values"]["a"]["shape"][0] = "4"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=r"g\.json: values\.a\.shape\[0\]: expected an int"):
        ec.load(path)


def test_bool_is_not_accepted_as_an_int():
    data = ec.graph_to_json(small_graph())
    data["nodes"][1]["args"][1] = {"int": True}
    with pytest.raises(SchemaError, match=r"nodes\[1\]\.args\[1\]: expected a 64-bit integer, got True"):
        ec.graph_from_json(data)


def test_unknown_argument_tag_lists_the_tags():
    with pytest.raises(SchemaError, match=r"x: unknown argument tag 'tensor'; tags are ref, sym"):
        decode_arg({"tensor": [1]}, "x")


@pytest.mark.parametrize("data", [{"int": 1, "float": 2.0}, [1], 3])
def test_argument_must_be_a_single_tag(data):
    with pytest.raises(SchemaError, match="expected a tagged value"):
        decode_arg(data)


@pytest.mark.parametrize("tag,value", [("device", "toaster"), ("dtype", "float17"), ("layout", "wavy"),
                                       ("memory_format", "strided"), ("float", "lots")])
def test_bad_tagged_value_names_what_is_unknown(tag, value):
    with pytest.raises(SchemaError, match=value):
        decode_arg({tag: value}, "arg")


def test_missing_field_is_named():
    data = ec.graph_to_json(small_graph())
    del data["nodes"][0]["op"]
    with pytest.raises(SchemaError, match=r"nodes\[0\]: missing field 'op'"):
        ec.graph_from_json(data)


def test_wrong_format_is_refused():
    data = ec.graph_to_json(small_graph()) | {"format": "onnx"}
    with pytest.raises(SchemaError, match="format: expected 'ember-graph', got 'onnx'"):
        ec.graph_from_json(data)


def test_reader_fills_defaults_of_optional_fields():
    data = ec.graph_to_json(small_graph())
    del data["constants"], data["producer"], data["nodes"][0]["kwargs"], data["nodes"][0]["meta"]
    for record in (*data["inputs"], *data["outputs"]):
        del record["kind"]
    assert ec.graph_from_json(data) == small_graph()


# ---------------------------------------------------------------------------------------------- the JSON Schema


def test_json_schema_is_a_valid_draft_2020_12_schema():
    schema = ec.json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_json_schema_ships_inside_the_package():
    path = ec.json_schema_path()
    assert path.name == "graph-v1.json" and path.parents[2].name == "ember_core"  # ember_core/graph/schema


def test_json_schema_of_an_unknown_major_is_an_error():
    with pytest.raises(SchemaError, match="no JSON Schema for schema version 7.x"):
        ec.json_schema_path(7)


def test_json_schema_enumerations_match_the_python_schema():
    defs = ec.json_schema()["$defs"]
    assert tuple(defs["dtype"]["enum"]) == DTYPE_NAMES
    assert tuple(defs["input"]["properties"]["kind"]["enum"]) == INPUT_KINDS
    assert tuple(defs["output"]["properties"]["kind"]["enum"]) == OUTPUT_KINDS
    assert tuple(defs["value"]["properties"]["type"]["enum"]) == VALUE_TYPES
    assert tuple(next(iter(b["properties"])) for b in defs["arg"]["oneOf"]) == ARG_TAGS


def test_json_schema_rejects_what_the_reader_rejects():
    data = ec.graph_to_json(small_graph())
    bad = copy.deepcopy(data)
    bad["nodes"][1]["args"][0] = {"ref": 3}
    assert not VALIDATOR.is_valid(bad)
    bad = copy.deepcopy(data)
    bad["values"]["x"]["dtype"] = "float17"
    assert not VALIDATOR.is_valid(bad)
    assert VALIDATOR.is_valid(data)
