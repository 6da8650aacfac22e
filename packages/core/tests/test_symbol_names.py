"""Symbol names: `rename_symbols` changes a symbol everywhere it appears; `canonical_symbols` names them s0, s1 ...
in order of first appearance, so the same program prints the same symbols whoever traced it."""

import pytest
import torch
from ember_core import (
    Graph,
    Input,
    Node,
    Output,
    Ref,
    Sym,
    Symbol,
    Value,
    canonical_symbols,
    interpret,
    rename_symbols,
    verify,
)
from ember_core.testing import OTHER_SIZE, battery_case, battery_names


def vec(*shape, stride=None, **kw) -> Value:
    return Value(shape=shape, stride=stride if stride is not None else (1,) * len(shape), **kw)


def traced_by_dynamo() -> Graph:
    """What a Dynamo capture looks like: sym inputs named after their symbols, sizes over hashed names."""
    return Graph(
        name="g",
        symbols=(Symbol("s27", 3, 2, None), Symbol("s77", 4, 2, 64)),
        inputs=(Input("s77"), Input("s27"), Input("x")),
        nodes=(
            Node(("v",), "aten.view.default", (Ref("x"), (Sym("s27*s77"),))),
            Node(("w",), "aten.add.Tensor", (Ref("v"), Ref("s77"))),
        ),
        outputs=(Output("w"), Output("s27")),
        values={"s77": Value(type="sym", dtype="int64"), "s27": Value(type="sym", dtype="int64"),
                "x": vec("s77", "s27", stride=("s27", 1)), "v": vec("s27*s77"), "w": vec("s27*s77")},
    )


def test_symbols_are_numbered_in_order_of_first_appearance():
    g = canonical_symbols(traced_by_dynamo())
    assert g.symbols == (Symbol("s0", 4, 2, 64), Symbol("s1", 3, 2, None))
    assert g.input_names == ("s0", "s1", "x")
    assert g.values["x"] == vec("s0", "s1", stride=("s1", 1))


def test_renaming_reaches_sym_arguments_refs_outputs_and_reprints_expressions():
    g = canonical_symbols(traced_by_dynamo())
    assert g.nodes[0].args == (Ref("x"), (Sym("s0*s1"),))
    assert g.nodes[1].args == (Ref("v"), Ref("s0"))
    assert g.outputs == (Output("w"), Output("s1"))
    assert g.values["v"].shape == ("s0*s1",) and set(g.values) == {"s0", "s1", "x", "v", "w"}
    verify(g)


def test_swapped_names_are_renamed_at_once():
    g = Graph(symbols=(Symbol("s0", 2), Symbol("s1", 3)), inputs=(Input("x"),), outputs=(Output("x"),),
              values={"x": vec("s1", "s0", stride=("s0", 1), storage_offset="2*s1")})
    x = canonical_symbols(g).values["x"]
    assert (x.shape, x.stride, x.storage_offset) == (("s0", "s1"), ("s1", 1), "2*s0")


def test_canonical_graph_is_returned_unchanged():
    g = canonical_symbols(traced_by_dynamo())
    assert canonical_symbols(g) is g


def test_symbols_used_nowhere_come_last_in_declared_order():
    g = Graph(symbols=(Symbol("u9", 1), Symbol("s5", 2), Symbol("s3", 3)), inputs=(Input("x"),),
              outputs=(Output("x"),), values={"x": vec("s3")})
    assert [s.name for s in canonical_symbols(g).symbols] == ["s0", "s1", "s2"]
    assert [s.hint for s in canonical_symbols(g).symbols] == [3, 1, 2]


def test_names_of_other_values_are_not_taken():
    g = Graph(symbols=(Symbol("s9", 2),), inputs=(Input("s0"), Input("x")), outputs=(Output("x"),),
              values={"s0": vec(4), "x": vec("s9")})
    g = canonical_symbols(g)
    assert g.symbols[0].name == "s1" and g.values["x"].shape == ("s1",) and g.input_names == ("s0", "x")


def test_rename_symbols_takes_any_mapping():
    g = rename_symbols(traced_by_dynamo(), {"s77": "n", "s27": "m"})
    assert [s.name for s in g.symbols] == ["m", "n"] and g.input_names == ("n", "m", "x")
    assert g.nodes[0].args[1] == (Sym("m*n"),)


@pytest.mark.parametrize("name", [n for n in battery_names() if "symbolic" in n])
def test_canonical_battery_graphs_verify_and_compute_the_same(name):
    case = battery_case(name)
    g = verify(canonical_symbols(case.graph))
    assert [s.name for s in g.symbols] == [f"s{k}" for k in range(len(g.symbols))]
    inputs = case.make_inputs(OTHER_SIZE, 2)
    for got, want in zip(interpret(g, inputs), interpret(case.graph, case.make_inputs(OTHER_SIZE, 2))):
        torch.testing.assert_close(got, want, equal_nan=True)


def test_specialize_symbols_puts_values_where_the_symbols_were():
    """A symbol specialized to a value is gone from the table, sizes, strides and `Sym` arguments (an expression
    left constant is an int); its `sym` input stays, and the graph computes what the symbolic one did there."""
    from ember_core import GraphError, specialize_symbols

    graph = traced_by_dynamo()
    at = specialize_symbols(graph, {"s27": 3})
    verify(at)
    assert [s.name for s in at.symbols] == ["s77"]
    assert at.input_names == graph.input_names
    assert at.values["x"].shape == ("s77", 3) and at.values["x"].stride == (3, 1)
    assert at.nodes[0].args[1] == (Sym("3*s77"),) and at.values["v"].shape == ("3*s77",)
    assert at.nodes[1].args == (Ref("v"), Ref("s77"))  # s77 still a symbol: its input is read
    assert specialize_symbols(graph, {"s77": 4}).nodes[1].args == (Ref("v"), 4)  # a read of its input: the value
    whole = specialize_symbols(graph, {"s27": 3, "s77": 4})
    assert whole.nodes[0].args[1] == (12,) and whole.values["w"].shape == (12,) and not whole.symbols
    x = torch.randn(4, 3)
    torch.testing.assert_close(interpret(whole, [4, 3, x]), interpret(graph, [4, 3, x]))
    with pytest.raises(GraphError, match="no symbol 's5'"):
        specialize_symbols(graph, {"s5": 1})
