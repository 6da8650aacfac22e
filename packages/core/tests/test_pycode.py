from __future__ import annotations

import builtins
import traceback

import pytest
import torch
from ember_core import Graph, GraphError, Input, Interpreter, Node, Output, Ref, Sym, Symbol, Value
from ember_core.execution._pycode import python_function
from ember_core.testing import battery


@pytest.mark.parametrize("case", battery(), ids=lambda c: c.name)
def test_generated_python_matches_the_interpreter(case):
    fn, _ = python_function(case.graph)
    expected = Interpreter(case.graph).run(case.inputs)
    torch.testing.assert_close(fn(list(case.inputs)), expected)


def _graph(nodes, outputs, values, inputs=("x",), symbols=()):
    return Graph("g", tuple(Input(i) for i in inputs), tuple(nodes), tuple(Output(o) for o in outputs), values,
                 symbols=symbols)


def test_source_is_one_line_per_node_and_frees_dead_values():
    t = Value(shape=(3,), stride=(1,))
    g = _graph([Node(("a",), "aten.sin.default", (Ref("x"),)), Node(("b",), "aten.cos.default", (Ref("a"),))],
               ["b"], {"x": t, "a": t, "b": t})
    _, source = python_function(g)
    assert source.splitlines() == [
        "def graph_g(inputs):",
        "    x, = inputs",
        "    a = _op0(x)  # aten.sin.default",
        "    del x",
        "    b = _op1(a)  # aten.cos.default",
        "    del a",
        "    return [b]",
    ]


def test_unsafe_value_names_become_v_names():
    t = Value(shape=(2,), stride=(1,))
    g = _graph([Node(("class",), "aten.neg.default", (Ref("_x"),))], ["class"], {"_x": t, "class": t}, inputs=("_x",))
    fn, source = python_function(g)
    assert "class =" not in source
    torch.testing.assert_close(fn([torch.ones(2)])[0], -torch.ones(2))


def test_symbolic_arguments_are_evaluated_from_input_sizes():
    x = Value(shape=("s0",), stride=(1,))
    g = _graph([Node(("y",), "aten.view.default", (Ref("x"), (Sym("s0//2"), 2)))], ["y"],
               {"x": x, "y": Value(shape=("s0//2", 2), stride=(2, 1))}, symbols=(Symbol("s0", 8, 2),))
    fn, _ = python_function(g)
    assert fn([torch.arange(10.0)])[0].shape == (5, 2)


def test_a_failing_node_shows_its_generated_line_in_the_traceback():
    t = Value(shape=(3,), stride=(1,))
    g = _graph([Node(("y",), "aten.mm.default", (Ref("x"), Ref("x")))], ["y"], {"x": t, "y": t})
    fn, _ = python_function(g)
    with pytest.raises(RuntimeError) as info:
        fn([torch.ones(3)])
    assert "y = _op0(x, x)  # aten.mm.default" in "".join(traceback.format_tb(info.tb))


def test_keyword_text_that_is_not_an_identifier_never_reaches_the_source():
    t = Value(shape=(4,), stride=(1,))
    key = "alpha=__import__('builtins').setattr(__import__('builtins'), 'EMBER_CANARY', 1),beta"
    g = _graph([Node(("y",), "aten.add.Tensor", (Ref("x"), Ref("x")), {key: 1})], ["y"], {"x": t, "y": t})
    with pytest.raises(GraphError, match="not an identifier"):
        python_function(g)
    assert not hasattr(builtins, "EMBER_CANARY")


def test_names_python_normalizes_alike_stay_two_values():
    # Python reads `ｘ` in source as `x` (NFKC): printed as themselves, the two inputs would be one variable.
    t = Value(shape=(2,), stride=(1,))
    g = _graph([Node(("y",), "aten.sub.Tensor", (Ref("x"), Ref("ｘ")))], ["y"], {"x": t, "ｘ": t, "y": t},
               inputs=("x", "ｘ"))
    fn, source = python_function(g)
    assert source.isascii()
    torch.testing.assert_close(fn([torch.ones(2), torch.full((2,), 3.0)])[0], torch.full((2,), -2.0))


@pytest.mark.parametrize("name", ["Ｂlock", "ｘ", "x²", "x¼", "日本", "a-b", "class"])
def test_a_graph_of_any_name_gets_a_function(name):
    t = Value(shape=(2,), stride=(1,))
    g = Graph(name, (Input("x"),), (Node(("y",), "aten.neg.default", (Ref("x"),)),), (Output("y"),), {"x": t, "y": t})
    fn, source = python_function(g)
    assert source.isascii()
    torch.testing.assert_close(fn([torch.ones(2)])[0], -torch.ones(2))
