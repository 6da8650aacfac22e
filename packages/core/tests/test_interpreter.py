"""The reference interpreter: eager PyTorch's results on every battery graph, at every size; clear failures."""

import ember_core as ec
import pytest
import torch
from ember_core import Constant, Graph, GraphError, Input, Interpreter, Node, Output, Ref, Sym, Symbol, Value
from ember_core.testing import battery_case, battery_names, clone_inputs


@pytest.mark.parametrize("name", battery_names())
def test_interpreter_matches_eager_on_every_input_set(name):
    case = battery_case(name)
    run = Interpreter(case.graph)
    for inputs in case.input_sets():
        got = run(clone_inputs(inputs))
        want = case.reference(*clone_inputs(inputs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_symbolic_graph_runs_at_a_new_size():
    case = battery_case("symbolic_sizes")
    (x,) = case.make_inputs(13, 0)
    out = ec.interpret(case.graph, [x])
    assert out[0].shape == (26, 4)


def test_functional_graph_leaves_its_inputs_alone():
    case = battery_case("input_mutation")
    inputs = case.inputs
    before = clone_inputs(inputs)
    ec.interpret(case.graph, inputs)
    torch.testing.assert_close(inputs, before)


def view_graph(shape=("s0", 4)) -> Graph:
    """view(x, [4*s0]): a symbolic argument the interpreter evaluates from the input's shape."""
    return Graph(
        name="flat",
        symbols=(Symbol("s0", 3),),
        inputs=(Input("x"),),
        nodes=(Node(("y",), "aten.view.default", (Ref("x"), (Sym("4*s0"),))),),
        outputs=(Output("y"),),
        values={"x": Value(shape=shape, stride=(4, 1)), "y": Value(shape=("4*s0",), stride=(1,))},
    )


def test_symbolic_arguments_are_evaluated_from_input_shapes():
    (y,) = ec.interpret(view_graph(), [torch.randn(5, 4)])
    assert y.shape == (20,)


def test_symbol_no_input_binds_is_a_clear_error():
    with pytest.raises(GraphError, match=r"symbol 's0' in '4\*s0' has no value") as err:
        ec.interpret(view_graph(shape=(3, 4)), [torch.randn(3, 4)])
    assert "While running node 0 of graph 'flat'" in "\n".join(err.value.__notes__)


def test_sym_input_named_after_its_symbol_binds_it():
    g = view_graph(shape=(3, 4))
    g = g.replace(inputs=(*g.inputs, Input("s0")), values=g.values | {"s0": Value(type="sym", dtype="int64")})
    (y,) = ec.interpret(g, [torch.randn(3, 4), 3])
    assert y.shape == (12,)


def test_wrong_number_of_inputs_names_the_graph():
    with pytest.raises(GraphError, match="graph 'flat' takes 1 inputs, got 2"):
        ec.interpret(view_graph(), [torch.randn(3, 4), torch.randn(3)])


def test_failing_op_gets_a_note_naming_the_node():
    with pytest.raises(RuntimeError) as err:
        ec.interpret(view_graph(), [torch.randn(3, 5)])  # 15 elements cannot view as 12
    note = "While running node 0 of graph 'flat': y: f32[4*s0] = aten.view.default(x, [sym(4*s0)])"
    assert note in err.value.__notes__


def test_constants_are_read_like_values():
    v = Value(shape=(2,), stride=(1,))
    g = Graph(inputs=(Input("x"),), nodes=(Node(("y",), "aten.add.Tensor", (Ref("x"), Ref("c"))),),
              outputs=(Output("y"), Output("c")), values={"x": v, "y": v},
              constants={"c": Constant("c", torch.tensor([10.0, 20.0]))})
    y, c = ec.interpret(g, [torch.tensor([1.0, 2.0])])
    assert y.tolist() == [11.0, 22.0] and c.tolist() == [10.0, 20.0]


def test_an_input_can_be_an_output_and_be_read_after_use():
    v = Value(shape=(2,), stride=(1,))
    g = Graph(inputs=(Input("x"),), nodes=(Node(("y",), "aten.neg.default", (Ref("x"),)),),
              outputs=(Output("x"), Output("y")), values={"x": v, "y": v})
    x = torch.tensor([1.0, 2.0])
    out = ec.interpret(g, [x])
    assert out[0] is x and out[1].tolist() == [-1.0, -2.0]


def test_interpreter_is_reusable_across_calls():
    run = Interpreter(view_graph())
    assert [run([torch.randn(n, 4)])[0].shape[0] for n in (2, 7)] == [8, 28]


def test_unknown_op_fails_when_planning():
    g = view_graph().replace(nodes=(Node(("y",), "aten.nope.default", (Ref("x"),)),))
    with pytest.raises(GraphError, match="unknown op 'aten.nope.default'"):
        Interpreter(g)


def test_overrides_run_in_place_of_the_named_op():
    graph = ec.parse_graph("""# ember graph v1.0
def g(x: f32[3]):
  exp: f32[3] = aten.exp.default(x)
  return (exp)
""")
    x = torch.randn(3)
    torch.testing.assert_close(Interpreter(graph, overrides={"aten.exp.default": torch.sin}).run([x])[0], x.sin())


def test_a_node_runs_on_fakes_for_its_layout_and_a_view_the_layout_cannot_take_as_reshape():
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = Graph("g", (), {}, (), ())
    flat = Node(("y",), "aten.view.default", (Ref("x"), (2, -1)), {})
    with FakeTensorMode():
        env = {"x": torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last), "c": torch.empty(2, 60)}
        node, result = ec.run_on_fakes(graph, flat, env)
        assert node.op == "aten.reshape.default" and result.shape == (2, 60) and result.is_contiguous()
        permuted = Node(("z",), "aten.permute.default", (Ref("x"), (0, 2, 3, 1)), {})
        node, result = ec.run_on_fakes(graph, permuted, env)
        assert node == permuted and result.is_contiguous()  # channels-last, permuted to NHWC
        node, result = ec.run_on_fakes(graph, Node(("w",), "aten.mm.default", (Ref("x"), Ref("c")), {}), env)
        assert result is None  # 4-d input: mm does not run
        viewable = flat.replace(args=(Ref("c"), (2, -1)))
        node, result = ec.run_on_fakes(graph, viewable, env)
        assert node == viewable and result._base is env["c"]  # a view where the layout allows one
