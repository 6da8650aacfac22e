"""Graph files are untrusted input: what the issue saw, each case ending in a clean `EmberError` naming the field,
quickly, with nothing run."""

import builtins
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ember_core as ec
import pytest
from ember_core import EmberError, SchemaError

GOLDEN = Path(__file__).parent / "golden" / "v1.0"
PAYLOAD = "__import__('builtins').setattr(__import__('builtins'), 'EMBER_CANARY', 1)"


@pytest.fixture(autouse=True)
def no_canary():
    yield
    assert not hasattr(builtins, "EMBER_CANARY"), "text from a graph file was run as code"


def golden(name: str = "symbolic_sizes") -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def load_and_verify(data: dict | str, tmp_path: Path) -> ec.Graph:
    path = tmp_path / "g.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return ec.verify(ec.load(path))


def first_value(data: dict) -> str:
    return next(k for k, v in data["values"].items() if v["type"] == "tensor" and v["shape"])


def test_code_in_a_symbolic_size_is_refused_and_never_run(tmp_path):
    data = golden()
    name = first_value(data)
    data["values"][name]["shape"][0] = {"sym": PAYLOAD}
    with pytest.raises(SchemaError, match=rf"values\.{name}\.shape\[0\]"):
        load_and_verify(data, tmp_path)


def test_code_in_a_sym_argument_is_refused_and_never_run(tmp_path):
    data = golden()
    node = next(n for n in data["nodes"] if n["args"])
    node["args"][-1] = {"sym": PAYLOAD}
    with pytest.raises(SchemaError, match=r"args\[\d+\]"):
        load_and_verify(data, tmp_path)


def test_nesting_deeper_than_python_recursion_is_a_schema_error(tmp_path):
    deep = '{"list": [' * 5000 + '{"int": 1}' + "]}" * 5000
    text = json.dumps(golden("pointwise_chain")).replace('{"int": 1}', deep, 1)
    with pytest.raises(SchemaError, match="nest"):
        load_and_verify(text, tmp_path)


def test_argument_lists_nested_past_the_limit_are_refused_naming_the_field(tmp_path):
    deep = '{"list": [' * 40 + '{"int": 1}' + "]}" * 40
    text = json.dumps(golden("pointwise_chain")).replace('{"int": 1}', deep, 1)
    with pytest.raises(SchemaError, match=r"nodes\[1\]\.args\[1\].*nested deeper"):
        load_and_verify(text, tmp_path)


def test_deeply_nested_json_anywhere_is_a_schema_error(tmp_path):
    text = json.dumps(golden("pointwise_chain"))[:-1] + ', "future": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(SchemaError, match="nest"):
        load_and_verify(text, tmp_path)


def test_integer_with_thousands_of_digits_is_a_schema_error(tmp_path):
    text = json.dumps(golden("pointwise_chain")).replace('{"int": 1}', '{"int": ' + "9" * 5000 + "}", 1)
    with pytest.raises(SchemaError):
        load_and_verify(text, tmp_path)


def test_tower_of_powers_in_a_size_fails_fast(tmp_path):
    data = golden()
    data["values"][first_value(data)]["shape"][0] = {"sym": "10**10**10"}
    start = time.perf_counter()
    with pytest.raises(SchemaError, match="larger than"):
        load_and_verify(data, tmp_path)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("field,dim", [("shape", -1), ("shape", 2**63), ("stride", -3), ("stride", 2**64)])
def test_sizes_outside_int64_or_negative_are_refused(tmp_path, field, dim):
    data = golden("pointwise_chain")
    name = first_value(data)
    data["values"][name][field][0] = dim
    with pytest.raises(SchemaError, match=rf"values\.{name}\.{field}\[0\]"):
        load_and_verify(data, tmp_path)


def test_negative_storage_offset_is_refused(tmp_path):
    data = golden("pointwise_chain")
    name = first_value(data)
    data["values"][name]["storage_offset"] = -1
    with pytest.raises(SchemaError, match="storage_offset"):
        load_and_verify(data, tmp_path)


@pytest.mark.parametrize("version", [[True, 0], [1, False], [1.0, 0], [1], "1.0", None, [1, -1]])
def test_version_must_be_two_integers(tmp_path, version):
    data = golden("pointwise_chain")
    data["version"] = version
    with pytest.raises(SchemaError, match="version"):
        load_and_verify(data, tmp_path)


def test_emptied_argument_list_is_refused_naming_the_missing_argument(tmp_path):
    data = golden("pointwise_chain")
    data["nodes"][0]["args"] = []
    with pytest.raises(EmberError, match=r"node 0 .*missing argument 'self'"):
        load_and_verify(data, tmp_path)


def test_too_many_arguments_are_refused(tmp_path):
    data = golden("pointwise_chain")
    data["nodes"][0]["args"] += [{"int": 1}] * 3
    with pytest.raises(EmberError, match="node 0 .*takes at most"):
        load_and_verify(data, tmp_path)


def test_unknown_keyword_is_refused(tmp_path):
    data = golden("pointwise_chain")
    data["nodes"][0]["kwargs"] = {"bogus": {"int": 1}}
    with pytest.raises(EmberError, match="node 0 .*unknown keyword 'bogus'"):
        load_and_verify(data, tmp_path)


@pytest.mark.parametrize("op", ["aten.__class__.__init__", "__builtins__.eval.x", "aten.add.__call__",
                                "aten.add.Tensor.x", "aten.add.__name__"])
def test_op_names_are_overloads_not_attribute_chains(tmp_path, op):
    data = golden("pointwise_chain")
    data["nodes"][0]["op"] = op
    with pytest.raises(EmberError, match="unknown op"):
        load_and_verify(data, tmp_path)


@pytest.mark.parametrize("symbol,field", [({"name": "s0", "hint": -1, "lower": 0, "upper": None}, "hint"),
                                           ({"name": "s0", "hint": 4, "lower": 5, "upper": 3}, "upper"),
                                           ({"name": "s0", "hint": 2**63, "lower": 0, "upper": None}, "hint"),
                                           ({"name": "2x", "hint": 4, "lower": 0, "upper": None}, "name")])
def test_symbols_outside_their_meaning_are_refused(tmp_path, symbol, field):
    data = golden()
    data["symbols"][0] = {**data["symbols"][0], **symbol}
    with pytest.raises(EmberError, match=field):
        load_and_verify(data, tmp_path)


def test_constant_data_must_match_its_shape(tmp_path):
    data = golden("constants")
    name, const = next((k, c) for k, c in data["constants"].items() if "data" in c)
    const["data"] = const["data"][:-1]
    with pytest.raises(SchemaError, match=rf"constants\.{name}"):
        load_and_verify(data, tmp_path)


def test_constant_with_a_huge_shape_is_refused_without_allocating(tmp_path):
    data = golden("constants")
    name, const = next((k, c) for k, c in data["constants"].items() if "data" in c)
    const["shape"] = [2**40, 2**40]
    with pytest.raises(SchemaError, match=rf"constants\.{name}"):
        load_and_verify(data, tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_a_fifo_is_not_read(tmp_path):
    fifo = tmp_path / "g.json"
    os.mkfifo(fifo)
    with pytest.raises(SchemaError, match="not a regular file"):
        ec.load(fifo)


def test_a_directory_is_a_clean_error(tmp_path):
    with pytest.raises(SchemaError, match="not a regular file"):
        ec.load(tmp_path)


def test_file_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    import ember_core.graph._json as json_module
    monkeypatch.setattr(json_module, "MAX_FILE_BYTES", 100)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(golden("pointwise_chain")))
    with pytest.raises(SchemaError, match="larger than"):
        ec.load(path)


def test_valid_golden_files_still_load_and_verify(tmp_path):
    for path in sorted(GOLDEN.glob("*.json")):
        ec.verify(ec.load(path))


# ---------------------------------------------------------------------------------------------- numbers that do not fit

def test_constant_whose_row_major_strides_overflow_int64_is_refused(tmp_path):
    data = golden("constants")
    name, const = next((k, c) for k, c in data["constants"].items() if "data" in c)
    const["shape"], const["data"] = [0, 2**63 - 1, 4], []  # no elements, but a stride of 4 * (2**63 - 1)
    with pytest.raises(SchemaError, match=rf"constants\.{name}\.shape: .*stride"):
        load_and_verify(data, tmp_path)


@pytest.mark.parametrize("size", ["1/3", "s75/2", "ToFloat(s75)", "-s75", "s75 - 7", "PowByNatural(7, 10**30)",
                                  "LShift(1, s75)"])
def test_sizes_that_are_not_non_negative_integers_at_the_hints_are_refused(tmp_path, size):
    data = golden()
    name = first_value(data)
    data["values"][name]["shape"][0] = {"sym": size}
    with pytest.raises(SchemaError, match=rf"values\.{name}\.shape\[0\]"):
        load_and_verify(data, tmp_path)


def test_a_sym_argument_that_is_not_an_integer_is_refused(tmp_path):
    data = golden()
    node = next(n for n in data["nodes"] if n["op"] == "aten.view.default")
    node["args"][1]["list"][0] = {"sym": "s75/2"}
    with pytest.raises(SchemaError, match=r"args\[1\]\[0\]: .*not an integer"):
        load_and_verify(data, tmp_path)


@pytest.mark.parametrize("shape,stride", [([2**62, 4], [4, 1]), ([2**31, 2**62, 0], [0, 0, 1])])
def test_sizes_that_multiply_past_int64_are_refused_even_with_a_zero(tmp_path, shape, stride):
    data = golden("pointwise_chain")
    name = first_value(data)
    data["values"][name]["shape"], data["values"][name]["stride"] = shape, stride
    with pytest.raises(SchemaError, match=rf"values\.{name}\.shape: sizes that multiply to"):
        load_and_verify(data, tmp_path)


@pytest.mark.parametrize("dtype,item", [("float16", {"float": 1e300}), ("float32", {"float": 1e300}),
                                        ("int8", {"int": 300}), ("int64", {"float": 1.5}), ("bool", {"int": 5}),
                                        ("float8_e4m3fn", {"float": "inf"})])
def test_constant_values_that_do_not_fit_their_dtype_are_refused(tmp_path, dtype, item):
    data = golden("constants")
    name, const = next((k, c) for k, c in data["constants"].items() if "data" in c)
    const["dtype"], const["data"][0] = dtype, item
    with pytest.raises(SchemaError, match=rf"constants\.{name}\.data: .*item 0"):
        load_and_verify(data, tmp_path)


# ---------------------------------------------------------------------------------------------- names from tables

@pytest.mark.parametrize("tag,text", [("layout", "_inductor"), ("memory_format", "onnx"), ("layout", "__class__")])
def test_layout_and_memory_format_tags_come_from_a_table_and_import_nothing(tmp_path, tag, text):
    data = golden("every_field")
    node = next(n for n in data["nodes"] if "layout" in n["kwargs"])
    node["kwargs"]["layout"] = {tag: text}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    probe = ("import sys, ember_core as ec\n"
             f"try:\n    ec.load({str(path)!r})\nexcept ec.SchemaError as e:\n    print('refused', e)\n"
             "print(sorted(m for m in sys.modules if m.startswith(('torch._inductor', 'torch.onnx'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300).stdout
    assert f"nodes[5].kwargs.layout: unknown {tag.replace('_', ' ')} {text!r}" in out
    assert out.splitlines()[-1] == "[]"
