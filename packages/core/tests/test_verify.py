"""verify(): every schema rule, and errors that name the node and field and show the graph with the node marked."""

import ember_core as ec
import pytest
import torch
from ember_core import Constant, Graph, GraphError, Input, Node, Output, Ref, Sym, Symbol, Value
from ember_core.testing import battery_case, battery_names

VEC = Value(shape=(4,), stride=(1,))


def graph(*nodes: Node, inputs=("x",), outputs=None, extra_values=None, **changes) -> Graph:
    """A graph over f32[4] values; every node output and input gets a values entry."""
    names = [*inputs, *(o for n in nodes for o in n.outputs)]
    outs = outputs if outputs is not None else (Output(names[-1]),)
    values = {n: VEC for n in names} | (extra_values or {})
    g = Graph(name="g", inputs=tuple(Input(i) for i in inputs), nodes=nodes, outputs=outs, values=values)
    return g.replace(**changes)


def neg(out: str, src: str, **kw) -> Node:
    return Node((out,), "aten.neg.default", (Ref(src),), **kw)


@pytest.mark.parametrize("name", battery_names())
def test_battery_graph_verifies(name):
    assert ec.verify(battery_case(name).graph) is battery_case(name).graph


def test_unknown_op_names_the_node_and_marks_it():
    g = graph(neg("a", "x"), Node(("b",), "aten.frobnicate.default", (Ref("a"),)), neg("c", "b"))
    with pytest.raises(GraphError) as err:
        ec.verify(g)
    text = str(err.value)
    assert "node 1 (b = aten.frobnicate.default).op: unknown op 'aten.frobnicate.default'" in text
    assert "> b: f32[4] = aten.frobnicate.default(a)" in text.splitlines()
    assert "  c: f32[4] = aten.neg.default(b)" in text.splitlines()


def test_malformed_op_name_says_what_is_expected():
    with pytest.raises(GraphError, match="expected 'namespace.op.overload'"):
        ec.verify(graph(Node(("a",), "neg", (Ref("x"),))))


def test_undefined_argument_names_node_argument_and_value():
    g = graph(neg("a", "x"), Node(("b",), "aten.add.Tensor", (Ref("a"), Ref("ghost"))))
    where = r"node 1 \(b = aten.add.Tensor\)\.args\[1\]"
    with pytest.raises(GraphError, match=where + ": refers to undefined value 'ghost'") as err:
        ec.verify(g)
    assert "> b: f32[4] = aten.add.Tensor(a, ghost)" in str(err.value)


def test_value_used_before_its_definition_is_undefined():
    with pytest.raises(GraphError, match=r"args\[0\]: refers to undefined value 'b'"):
        ec.verify(graph(neg("a", "b"), neg("b", "x")))


def test_undefined_kwarg_is_named_by_key():
    g = graph(Node(("a",), "aten.add.Tensor", (Ref("x"),), {"other": Ref("nope")}))
    with pytest.raises(GraphError, match=r"\.kwargs\.other: refers to undefined value 'nope'"):
        ec.verify(g)


def test_value_defined_twice_is_an_error():
    with pytest.raises(GraphError, match="value 'a' is defined twice"):
        ec.verify(graph(neg("a", "x"), neg("a", "x")))


def test_missing_values_entry_is_named():
    g = graph(neg("a", "x"))
    with pytest.raises(GraphError, match="value 'a' has no entry in values"):
        ec.verify(g.replace(values={"x": VEC}))


def test_node_without_outputs_is_an_error():
    with pytest.raises(GraphError, match="node has no outputs"):
        ec.verify(graph(Node((), "aten.neg.default", (Ref("x"),)), outputs=(Output("x"),)))


def test_error_window_shows_ten_nodes_either_side():
    nodes = [neg(f"v{i}", f"v{i - 1}" if i else "x") for i in range(40)]
    nodes[20] = Node(("v20",), "aten.nope.default", (Ref("v19"),))
    with pytest.raises(GraphError) as err:
        ec.verify(graph(*nodes))
    lines = str(err.value).splitlines()
    assert "  ... 10 nodes" in lines and "  ... 9 nodes" in lines
    assert sum(ln.startswith(("  v", "> v")) for ln in lines) == 21


@pytest.mark.parametrize("field,value,message", [
    ("type", "blob", "unknown value type 'blob'"),
    ("dtype", "float17", "unknown dtype 'float17'"),
    ("stride", (1, 1), "shape has 1 dims but stride has 2"),
])
def test_bad_value_metadata_names_the_value(field, value, message):
    g = graph(neg("a", "x"))
    g = g.replace(values=g.values | {"a": VEC.replace(**{field: value})})
    with pytest.raises(GraphError, match=rf"values\.a.*{message}"):
        ec.verify(g)


def test_undeclared_symbol_in_a_shape_is_named():
    g = graph(neg("a", "x"), extra_values={"a": Value(shape=("s3",), stride=(1,))})
    with pytest.raises(GraphError, match=r"values\.a\.shape: symbolic expression 's3' uses undeclared symbol 's3'"):
        ec.verify(g)


def test_undeclared_symbol_in_an_argument_names_the_node():
    g = graph(Node(("a",), "aten.view.default", (Ref("x"), (Sym("2*s1"),))), symbols=(Symbol("s0", 4),))
    with pytest.raises(GraphError, match=r"node 0 \(a = aten.view.default\)\.args\[1\]: .* undeclared symbol 's1'"):
        ec.verify(g)


def test_unparsable_symbolic_expression_is_named():
    g = graph(Node(("a",), "aten.view.default", (Ref("x"), (Sym("2*(s0"),))), symbols=(Symbol("s0", 4),))
    with pytest.raises(GraphError, match=r"args\[1\]: symbolic expression does not parse: expression '2\*\(s0'"):
        ec.verify(g)


def test_declared_symbols_verify():
    g = graph(Node(("a",), "aten.view.default", (Ref("x"), (Sym("s0"),))), symbols=(Symbol("s0", 4),),
              extra_values={"x": Value(shape=("s0",), stride=(1,)), "a": Value(shape=("s0",), stride=(1,))})
    ec.verify(g)


def test_unknown_input_kind_is_named():
    g = graph(neg("a", "x"))
    with pytest.raises(GraphError, match=r"inputs\[0\]\.kind: unknown input kind 'weights'"):
        ec.verify(g.replace(inputs=(Input("x", "weights"),)))


def test_unknown_output_kind_is_named():
    with pytest.raises(GraphError, match=r"outputs\[0\]\.kind: unknown output kind 'result'"):
        ec.verify(graph(neg("a", "x"), outputs=(Output("a", "result"),)))


def test_undefined_output_is_named():
    with pytest.raises(GraphError, match=r"outputs\[0\]\.name: refers to undefined value 'zz'"):
        ec.verify(graph(neg("a", "x"), outputs=(Output("zz"),)))


def test_mutation_output_needs_a_valid_input_index():
    with pytest.raises(GraphError, match=r"outputs\[0\]\.input: output of kind 'mutation' needs a valid input index"):
        ec.verify(graph(neg("a", "x"), outputs=(Output("a", "mutation", 3),)))


def test_mutated_input_needs_a_mutation_output():
    g = graph(neg("a", "x")).replace(inputs=(Input("x", mutated=True),))
    with pytest.raises(GraphError, match=r"inputs\[0\]\.mutated: input 'x' is marked mutated but no output carries"):
        ec.verify(g)


def test_mutation_output_needs_its_input_marked_mutated():
    with pytest.raises(GraphError, match=r"outputs\[0\]\.input: mutation output of input 0 \('x'\), but .* not marked"):
        ec.verify(graph(neg("a", "x"), outputs=(Output("a", "mutation", 0),)))


def test_input_has_at_most_one_mutation_output():
    g = graph(neg("a", "x"), neg("b", "x"), outputs=(Output("a", "mutation", 0), Output("b", "mutation", 0)))
    with pytest.raises(GraphError, match=r"outputs\[1\]\.input: input 0 \('x'\) already has a mutation output"):
        ec.verify(g.replace(inputs=(Input("x", mutated=True),)))


def test_unknown_region_is_named():
    with pytest.raises(GraphError, match=r"meta\.region: unknown region 'sideways'"):
        ec.verify(graph(neg("a", "x", meta={"region": "sideways"})))


NOT_A_REGION = "checkpoint region must be a non-negative decimal number"


@pytest.mark.parametrize("meta, where, message", [
    ({"checkpoint": "1", "checkpoint_policy": "sometimes"}, "checkpoint_policy", "unknown checkpoint policy 'some"),
    ({"checkpoint": "-1", "checkpoint_policy": "must_save"}, "checkpoint", f"{NOT_A_REGION}, got '-1'"),
    ({"checkpoint": "\u0661", "checkpoint_policy": "must_save"}, "checkpoint", NOT_A_REGION),
    ({"checkpoint": "2"}, "checkpoint", "a checkpoint region needs a checkpoint_policy"),
])
def test_malformed_checkpoint_marks_are_named(meta, where, message):
    with pytest.raises(GraphError, match=rf"meta\.{where}: {message}"):
        ec.verify(graph(neg("a", "x", meta=meta)))


def test_constants_are_defined_values():
    g = graph(Node(("a",), "aten.add.Tensor", (Ref("x"), Ref("c"))), constants={"c": Constant("c", torch.ones(4))})
    ec.verify(g)


def test_constant_named_like_an_input_is_an_error():
    g = graph(neg("a", "x"), constants={"x": Constant("x", torch.ones(4))})
    with pytest.raises(GraphError, match=r"constants\.x: constant 'x' has the name of an input"):
        ec.verify(g)


# ---------------------------------------------------------------------------------------------- argument types

@pytest.mark.parametrize("node,argument,got", [
    (Node(("a",), "aten.sum.dim_IntList", (Ref("x"), (float("inf"),))), "dim", r"a list \[inf\]"),
    (Node(("a",), "aten.addmm.default", (Ref("x"), Ref("x"), (1, 2))), "mat2", r"a list \[1, 2\]"),
    (Node(("a",), "aten.add.Tensor", (Ref("x"), Ref("x")), {"alpha": "two"}), "alpha", "str 'two'"),
    (Node(("a",), "aten.clone.default", (Ref("x"),), {"memory_format": torch.float32}), "memory_format",
     "dtype torch.float32"),
    (Node(("a",), "aten.new_zeros.default", (Ref("x"), (4,)), {"dtype": 6}), "dtype", "int 6"),
    (Node(("a",), "aten.neg.default", (1.5,)), None, None),  # a number stands for a tensor, as torch wraps it
])
def test_arguments_must_have_their_schema_types(node, argument, got):
    g = graph(node)
    if argument is None:
        ec.verify(g)
        return
    where = rf"node 0 \(a = {node.op}\)\.args: {node.op}: argument '{argument}' expects .*, got {got}"
    with pytest.raises(GraphError, match=where):
        ec.verify(g)


def test_a_ref_to_a_tensor_is_not_an_int():
    g = graph(Node(("a",), "aten.select.int", (Ref("x"), Ref("x"), 0)))
    with pytest.raises(GraphError, match=r"argument 'dim' expects int, got value 'x' \(tensor of float32\)"):
        ec.verify(g)
