"""`parse_graph` reads the canonical text back exactly: `parse_graph(format_graph(g)) == g` for every graph of the
battery, the golden files and the printer's own examples. Text is untrusted: every way it can be wrong ends in a
`SchemaError` naming the line, and nothing in it is evaluated."""

import builtins
from pathlib import Path

import pytest
import test_printer
import torch
from ember_core import (
    Constant,
    Graph,
    Input,
    Node,
    Output,
    Ref,
    SchemaError,
    Sym,
    Symbol,
    Value,
    dumps,
    format_graph,
    load,
    load_text,
    parse_graph,
    save,
)
from ember_core.testing import PAYLOADS, battery_case, battery_names

GOLDEN = sorted((Path(__file__).parent / "golden").glob("v*/*.json"))


@pytest.fixture(autouse=True)
def no_canary():
    yield
    assert not hasattr(builtins, "EMBER_CANARY"), "graph text was run as code"


def round_trip(g: Graph, **kw) -> Graph:
    text = format_graph(g)
    again = parse_graph(text, **kw)
    assert format_graph(again) == text
    return again


@pytest.mark.parametrize("name", battery_names())
def test_battery_graphs_round_trip(name):
    g = battery_case(name).graph
    assert round_trip(g, constants={k: c.tensor for k, c in g.constants.items()}) == g


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_graphs_round_trip(path):
    g = load(path)
    assert round_trip(g, constants={k: c.tensor for k, c in g.constants.items()}) == g


@pytest.mark.parametrize("make", [test_printer.pointwise, test_printer.every_kind, test_printer.odd_names])
def test_printer_examples_round_trip_without_help(make):
    assert round_trip(make()) == make()


def test_small_constants_travel_in_the_text():
    g = test_printer.every_kind()
    assert "c0: f32[4] = constant [1.0, 1.0, 1.0, 1.0]" in format_graph(g)
    assert parse_graph(format_graph(g)).constants == g.constants


def test_large_constant_data_is_left_out_and_taken_separately():
    g = battery_case("constants").graph
    big = next(c for c in g.constants.values() if c.tensor.numel() > 64)
    assert f"{big.name}: f32[16, 8] = constant [...]" in format_graph(g)
    with pytest.raises(SchemaError, match=rf"line \d+.*constant '{big.name}' .*has no data in the text"):
        parse_graph(format_graph(g))
    with pytest.raises(SchemaError, match=r"expected f32\[16, 8\]"):
        parse_graph(format_graph(g), constants={big.name: torch.zeros(3)})


SCALARS = """\
# ember graph v1.0
# symbols: s0=4 in [2, inf]
def f(x: f32[s0], s0: sym:i64):
  a: f32[s0] = aten.add.Tensor(x, 1)
  b: f32[s0] = aten.add.Tensor(x, 1.0)
  c: f32[s0] = aten.add.Tensor(x, s0)
  d: f32[2, s0] = aten.expand.default(x, [2, sym(s0)], implicit=True)
  e: f16[s0] = aten._to_copy.default(x, device=@cpu, dtype=f16, layout=torch.strided)
  f: f32[s0] = aten.div.Tensor_mode(x, x, rounding_mode="floor")
  return (a, b, c, d, e, f)
"""


def test_scalars_read_back_with_their_type():
    g = parse_graph(SCALARS)
    args = {n.outputs[0]: (n.args, n.kwargs) for n in g.nodes}
    assert type(args["a"][0][1]) is int and type(args["b"][0][1]) is float
    assert args["c"][0][1] == Ref("s0") and args["d"][0][1] == (2, Sym("s0")) and args["d"][1] == {"implicit": True}
    assert args["e"][1] == {"dtype": torch.float16, "device": torch.device("cpu"), "layout": torch.strided}
    assert args["f"][1] == {"rounding_mode": "floor"}
    assert format_graph(g) + "\n" == SCALARS


def test_values_carry_every_field():
    text = ("# ember graph v1.0\n# symbols: s0=4 in [2, inf]\n"
            "def f(x: f32[s0, 4] requires_grad param mutated):\n"
            "  t: f32[4, s0]{1, 4} offset=sym(2*s0) requires_grad base=x = aten.t.default(x)  # m.py:3  module=fc\n"
            "  return (t, t mutation[0])\n")
    g = parse_graph(text)
    assert g.inputs == (Input("x", "param", True),)
    assert g.values["t"] == Value(shape=(4, "s0"), stride=(1, 4), requires_grad=True, base="x", storage_offset="2*s0")
    assert g.nodes[0].meta == {"source": "m.py:3", "module": "fc"}
    assert g.outputs == (Output("t"), Output("t", "mutation", 0))
    assert format_graph(g) + "\n" == text


def test_default_region_header_gives_unnoted_nodes_their_region():
    g = Graph(inputs=(Input("x"),), outputs=(Output("b"),), values={"x": Value(), "a": Value(), "b": Value()},
              nodes=(Node(("a",), "aten.neg.default", (Ref("x"),), meta={"region": "forward"}),
                     Node(("b",), "aten.neg.default", (Ref("a"),), meta={"region": "backward"})))
    text = format_graph(g)
    assert "# default region: forward" in text and text.count("# backward") == 1
    assert parse_graph(text) == g


HEADER = "# ember graph v1.0\ndef f(x: f32[4]):\n"


@pytest.mark.parametrize(("body", "error"), [
    ("  y: f32[4] = aten.frobnicate.default(x)", r"line 3, op: unknown op 'aten.frobnicate.default'"),
    ("  y: f33[4] = aten.neg.default(x)", r"line 3, type of y: unknown dtype 'f33'"),
    ("  y: f32[4] = aten.add.Tensor(x, 99999999999999999999)", r"line 3, args\[1\]: .*64-bit"),
    ("  y: f32[4] = aten.add.Tensor(x, sym(__import__('os')))", r"line 3, args\[1\]: expression"),
    ("  y: f32[4] = aten.add.Tensor(x, " + "[" * 40 + "1" + "]" * 40 + ")", r"line 3, args\[1\]: lists nested"),
    ("  y: f32[4], f32[4] = aten.neg.default(x)", r"line 3, type: 1 output\(s\) but 2 type\(s\)"),
    ("  y: f32[4] = aten.neg.default(x) junk", r"line 3, meta: expected '#'"),
    ("  ... 3 nodes", r"line 3: .*shortened"),
    ("> y: f32[4] = aten.neg.default(x)", r"line 3: .*marked"),
    ("  y: f32[4] = aten.neg.default(x)", r"line 4: expected 'return \(outputs\)'"),
])
def test_bad_text_names_the_line_and_field(body, error):
    with pytest.raises(SchemaError, match=error):
        parse_graph(HEADER + body + "\n", where="g.txt")


def test_error_names_the_file_and_points_at_the_column():
    with pytest.raises(SchemaError) as err:
        parse_graph(HEADER + "  y: f32[4] = aten.neg.default(x, $)\n  return (y)\n", where="g.txt")
    message = str(err.value)
    assert message.startswith("g.txt: line 3, args[1]: expected an argument, found '$)' (column 35)")
    assert message.splitlines()[-1].index("^") == message.splitlines()[-2].index("$")


@pytest.mark.parametrize("text", [
    "", "{\"format\": \"ember-graph\"}", "# ember graph v2.0\ndef f():\n  return ()\n",
    "# ember graph v1.0\n# symbols: s0=1 in [2, inf]\ndef f():\n  return ()\n",
    "# ember graph v1.0\n# colour: blue\ndef f():\n  return ()\n",
    "# ember graph v1.0\ndef f():\n  return ()\n  y: f32[4] = aten.neg.default(x)\n",
])
def test_bad_headers_and_structure_are_schema_errors(text):
    with pytest.raises(SchemaError, match=r"line \d+"):
        parse_graph(text)


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("place", ["dim", "sym", "arg", "name", "op", "producer", "note", "symbol"])
def test_payloads_anywhere_are_refused_or_read_as_plain_text(payload, place):
    text = {
        "dim": f"def f(x: f32[{payload}]):\n  return (x)\n",
        "sym": f"def f(x: f32[4]):\n  y: f32[4] = aten.add.Tensor(x, sym({payload}))\n  return (y)\n",
        "arg": f"def f(x: f32[4]):\n  y: f32[4] = aten.add.Tensor(x, {payload})\n  return (y)\n",
        "name": f"def {payload}(x: f32[4]):\n  return (x)\n",
        "op": f"def f(x: f32[4]):\n  y: f32[4] = {payload}(x)\n  return (y)\n",
        "producer": "def f(x: f32[4]):\n  return (x)\n",
        "note": f"def f(x: f32[4]):\n  y: f32[4] = aten.neg.default(x)  # {payload}\n  return (y)\n",
        "symbol": f"# symbols: {payload}=4 in [0, inf]\ndef f(x: f32[4]):\n  return (x)\n",
    }[place]
    header = f"# ember graph v1.0 from {payload}\n" if place == "producer" else "# ember graph v1.0\n"
    try:
        g = parse_graph(header + text)
    except SchemaError:
        return
    assert parse_graph(format_graph(g)) == g


def test_limits_on_text_and_line_length(monkeypatch):
    import ember_core.graph._parser as parser

    monkeypatch.setattr(parser, "MAX_TEXT_CHARS", 100)
    with pytest.raises(SchemaError, match="longer than the limit of 100"):
        parse_graph("#" * 101)
    monkeypatch.setattr(parser, "MAX_TEXT_CHARS", 1 << 20)
    monkeypatch.setattr(parser, "MAX_LINE_CHARS", 50)
    with pytest.raises(SchemaError, match="line 2: longer than 50 characters"):
        parse_graph(HEADER.replace("x: f32[4]", "x: f32[4], " * 10))


def test_load_text_takes_large_constants_from_the_json_dump_beside_it(tmp_path):
    g = battery_case("constants").graph
    (tmp_path / "000-graph.txt").write_text(format_graph(g) + "\n")
    with pytest.raises(SchemaError, match=r"000-graph\.txt: line \d+.*has no data"):
        load_text(tmp_path / "000-graph.txt")
    save(g, tmp_path / "000-graph.json")
    assert load_text(tmp_path / "000-graph.txt") == g


def test_load_text_of_a_json_file_says_so(tmp_path):
    path = save(test_printer.pointwise(), tmp_path / "g.txt")
    with pytest.raises(SchemaError, match="g.txt: line 1: .*a JSON graph file"):
        load_text(path)


def test_constants_mapping_must_match_dtype_and_shape():
    g = Graph(constants={"c": Constant("c", torch.zeros(100))}, outputs=(Output("c"),))
    assert parse_graph(format_graph(g), constants={"c": torch.ones(100)}).constants["c"] == Constant(
        "c", torch.ones(100))
    with pytest.raises(SchemaError, match="expected f32"):
        parse_graph(format_graph(g), constants={"c": torch.ones(100, dtype=torch.int64)})


def test_symbol_table_round_trips_with_unbounded_and_bounded_ranges():
    g = Graph(symbols=(Symbol("s0", 8, 2, None), Symbol("s1", 4, 1, 64)), inputs=(Input("x"),),
              outputs=(Output("x"),), values={"x": Value(shape=("s0", "s1"), stride=("s1", 1))})
    assert "# symbols: s0=8 in [2, inf], s1=4 in [1, 64]" in format_graph(g)
    assert parse_graph(format_graph(g)) == g


def test_an_int_symbol_that_may_be_negative_round_trips_in_text_and_json():
    """An int the program passed (Dynamo makes one a symbol once it changes) may be negative: its range goes below
    0, down to INT64_MIN when nothing bounds it; the readers refused such a symbol as no size."""
    from ember_core import INT64_MIN, loads

    g = Graph(symbols=(Symbol("s0", 8, 2, None), Symbol("s1", -1, INT64_MIN, -1), Symbol("s2", 3, INT64_MIN, None)),
              inputs=(Input("x"), Input("s1"), Input("s2")), outputs=(Output("x"),),
              values={"x": Value(shape=("s0",), stride=(1,)), "s1": Value(type="sym", dtype="int64"),
                      "s2": Value(type="sym", dtype="int64")})
    assert f"s1=-1 in [{INT64_MIN}, -1]" in format_graph(g)
    assert parse_graph(format_graph(g)) == g
    assert loads(dumps(g)) == g


# ---------------------------------------------------------------------------------------------- numbers that do not fit

def dims(n: int, size: int = 10) -> str:
    return ", ".join([str(size)] * n)


def test_implied_strides_past_int64_are_refused_as_json_refuses_them(tmp_path):
    text = f"# ember graph v1.0\ndef f(x: f32[{dims(40)}]):\n  y: f32[{dims(40)}] = aten.neg.default(x)\n  return (y)\n"
    with pytest.raises(SchemaError, match=r"line 2, inputs\[0\]: stride\[0\]: 10{39} outside \[0, 2\*\*63\)"):
        parse_graph(text)
    value = Value(shape=(10,) * 40, stride=tuple(10**k for k in reversed(range(40))))
    g = Graph(name="f", inputs=(Input("x"),), nodes=(), outputs=(Output("x"),), values={"x": value})
    (tmp_path / "f.json").write_text(dumps(g))
    with pytest.raises(SchemaError, match=r"values\.x\.stride\[0\]"):
        load(tmp_path / "f.json")


@pytest.mark.parametrize("size", ["1/3", "s0/2", "ToFloat(s0)", "-s0", "PowByNatural(7, 10**30)", "s0 - 9"])
def test_sizes_that_are_not_non_negative_integers_at_the_hints_are_refused(size):
    text = f"# ember graph v1.0\n# symbols: s0=4 in [2, inf]\ndef f(x: f32[{size}]):\n  return (x)\n"
    with pytest.raises(SchemaError, match=r"line 3, inputs\[0\]"):
        parse_graph(text)


@pytest.mark.parametrize("constant", ["f16[1] = constant [1e300]", "i8[1] = constant [300]",
                                      "f8e4m3[1] = constant [inf]", "b8[1] = constant [1]"])
def test_constant_values_that_do_not_fit_their_dtype_are_refused(constant):
    text = f"# ember graph v1.0\ndef f():\n  c: {constant}\n  return (c)\n"
    with pytest.raises(SchemaError, match="line 3, constant: not a list of"):
        parse_graph(text)


def test_constant_whose_row_major_strides_overflow_int64_is_refused():
    text = f"# ember graph v1.0\ndef f():\n  c: f32[0, {2**63 - 1}, 4] = constant []\n  return (c)\n"
    with pytest.raises(SchemaError, match="line 3, .*stride"):
        parse_graph(text)
