"""The fx bridge: ATen GraphModules to Graphs and back, exactly."""

import operator

import ember_core as ec
import pytest
import torch
import torch.fx as fx
from ember_core import GraphError, Input, Output, Sym, Value
from ember_core.testing import battery_case, battery_names, clone_inputs
from torch.fx.experimental.proxy_tensor import make_fx


@pytest.mark.parametrize("name", battery_names())
def test_graph_survives_to_fx_and_back(name):
    graph = battery_case(name).graph
    assert ec.from_fx(ec.to_fx(graph)) == graph


@pytest.mark.parametrize("name", battery_names())
def test_module_code_survives_from_fx_and_back(name):
    gm = battery_case(name).gm
    assert ec.to_fx(ec.from_fx(gm)).code == gm.code


@pytest.mark.parametrize("name", battery_names())
def test_to_fx_module_runs_like_the_interpreter(name):
    case = battery_case(name)
    got = ec.to_fx(case.graph)(*clone_inputs(case.inputs))
    want = ec.interpret(case.graph, clone_inputs(case.inputs))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_stamped_input_and_output_kinds_are_read():
    g = battery_case("input_mutation").graph
    assert g.inputs[0] == Input("x_1", mutated=True)
    assert g.outputs == (Output("add", "mutation", 0), Output("mul"))


def test_tuple_returning_op_gets_one_name_per_result():
    g = battery_case("multi_output").graph
    node = next(n for n in g.nodes if n.op == "aten.native_layer_norm.default")
    assert node.outputs == ("getitem", "getitem_1", "getitem_2") and node.meta["name"] == "native_layer_norm"


def test_list_returning_op_is_a_multi_output_node():
    node = next(n for n in battery_case("multi_output").graph.nodes if n.op == "aten.split.Tensor")
    assert len(node.outputs) == 3


def test_unused_results_of_a_tuple_op_get_default_names():
    gm = make_fx(lambda x: (x.max(dim=0)[0],), tracing_mode="fake")(torch.randn(3, 4))
    for n in list(gm.graph.nodes):
        if n.target is operator.getitem and n.args[1] == 1:
            gm.graph.erase_node(n)
    node = ec.from_fx(gm).nodes[0]
    assert node.outputs == ("getitem", "max_1_1")


def test_constants_become_graph_constants():
    g = battery_case("constants").graph
    assert sorted(g.constants) == ["_tensor_constant0", "_tensor_constant1"]
    assert g.constants["_tensor_constant1"].tensor.shape == (16, 8)


def test_a_constant_nothing_reads_survives_to_fx_and_back():
    # a pass may leave one for a later one to drop (freezing's fold-constants leaves the weight it transposed)
    gm = make_fx(lambda x: x + torch.ones(3))(torch.randn(3))
    g = ec.from_fx(gm)
    g = g.replace(constants={**g.constants, "unread": ec.Constant("unread", torch.zeros(2))})
    assert "unread" in ec.from_fx(ec.to_fx(g)).constants and ec.from_fx(ec.to_fx(g)) == g


def test_symbols_carry_hints_and_ranges():
    g = battery_case("symbolic_sizes").graph
    assert [(s.hint, s.lower, s.upper) for s in g.symbols] == [(6, 2, None), (8, 2, None)]


def test_name_and_producer_can_be_given():
    g = ec.from_fx(battery_case("softmax").gm, name="sm", producer="me 1.0")
    assert (g.name, g.producer) == ("sm", "me 1.0")


def test_source_and_module_come_from_fx_meta():
    gm = make_fx(lambda x: (x.neg(),))(torch.randn(2))
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.meta["stack_trace"] = '  File "/src/pkg/model.py", line 12, in forward\n    return x.neg()\n'
    node.meta["nn_module_stack"] = {"a": ("L['self'].encoder.layer0", object)}
    assert ec.from_fx(gm).nodes[0].meta == {"source": "model.py:12", "module": "encoder.layer0"}


def test_activation_checkpointing_marks_come_from_fx_meta():
    """What `torch.utils.checkpoint` under Dynamo leaves on a region's nodes (`recompute`: a CheckpointPolicy,
    `ac_graph_id`: the region), in the graph's terms; anything else under those keys is not read."""
    from torch.utils.checkpoint import CheckpointPolicy

    gm = make_fx(lambda x: (x.neg().exp().cos(),))(torch.randn(2))
    neg, exp, cos = (n for n in gm.graph.nodes if n.op == "call_function")
    neg.meta.update(recompute=CheckpointPolicy.PREFER_RECOMPUTE, ac_graph_id=3)
    exp.meta.update(recompute=CheckpointPolicy.MUST_SAVE, ac_graph_id=3)
    cos.meta.update(recompute="must_recompute\nevil", ac_graph_id="3; rm -rf")
    graph = ec.from_fx(gm)
    assert [n.meta for n in graph.nodes] == [  # regions numbered from 1 in the graph's order (below)
        {"checkpoint": "1", "checkpoint_policy": "prefer_recompute"},
        {"checkpoint": "1", "checkpoint_policy": "must_save"},
        {},
    ]
    assert ec.marked_for_recompute(graph.nodes[0].meta) and ec.marked_for_saving(graph.nodes[1].meta)
    assert ec.checkpoint_region(graph.nodes[0].meta) == 1 and ec.checkpoint_region(graph.nodes[2].meta) is None
    assert ec.verify(graph) is graph


def test_checkpoint_regions_are_numbered_in_the_graphs_order():
    """torch counts checkpoint calls for the whole process: the same program traced again has other numbers, and
    its graph would miss every cache keyed by the graph."""
    from torch.utils.checkpoint import CheckpointPolicy

    def traced(first: int) -> ec.Graph:
        gm = make_fx(lambda x: (x.neg().exp().cos(),))(torch.randn(2))
        for k, n in enumerate(n for n in gm.graph.nodes if n.op == "call_function"):
            n.meta.update(recompute=CheckpointPolicy.PREFER_RECOMPUTE, ac_graph_id=first + k)
        return ec.from_fx(gm)

    assert traced(4) == traced(17)
    assert [ec.checkpoint_region(n.meta) for n in traced(4).nodes] == [1, 2, 3]
    assert ec.from_fx(ec.to_fx(traced(4))) == traced(4)


def test_call_module_is_refused_naming_the_node():
    gm = fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
    with pytest.raises(GraphError, match=r"fx node '_0': opcode 'call_module' is not allowed"):
        ec.from_fx(gm)


def test_python_function_target_is_refused_naming_it():
    gm = fx.symbolic_trace(lambda x: torch.sin(x))
    with pytest.raises(GraphError, match="is not an ATen overload or a known symbolic-size function"):
        ec.from_fx(gm)


def test_constant_output_is_refused():
    g = fx.Graph()
    g.output((g.placeholder("x"), 3))
    with pytest.raises(GraphError, match="graph output 1 is 3, not a value of the graph"):
        ec.from_fx(fx.GraphModule(torch.nn.Module(), g))


def test_symbolic_argument_has_no_fx_form():
    g = battery_case("views_symbolic").graph
    view = next(i for i, n in enumerate(g.nodes) if n.op == "aten.view.default")
    nodes = list(g.nodes)
    nodes[view] = nodes[view].replace(args=(nodes[view].args[0], (Sym("8*s75"),)))
    with pytest.raises(GraphError, match=r"symbolic expression argument '8\*s75' has no fx form"):
        ec.to_fx(g.replace(nodes=tuple(nodes)))


def test_symbolic_int_argument_becomes_sym():
    from ember_core.graph._fx_bridge import _to_arg

    gm = make_fx(lambda x: (x.shape[0],), tracing_mode="symbolic")(torch.randn(5))
    sym = next(n for n in gm.graph.nodes if n.op == "call_function").meta["val"]
    assert _to_arg((sym, 2)) == (Sym(str(sym.node.expr)), 2)


@pytest.mark.parametrize("val,expected", [
    (torch.empty(2, 3).t(), Value("tensor", "float32", (3, 2), (1, 3))),
    (torch.empty(4, dtype=torch.int64)[1:], Value("tensor", "int64", (3,), (1,), storage_offset=1)),
    (3, Value("scalar", "int64")), (True, Value("scalar", "bool")), (1.5, Value("scalar", "float64")),
    (None, Value("none", "bool")),
])
def test_value_of_describes_traced_values(val, expected):
    assert ec.value_of(val) == expected


def test_value_of_refuses_unknown_types():
    with pytest.raises(GraphError, match="cannot describe traced value of type str"):
        ec.value_of("x")


def test_constant_returned_without_use_round_trips():
    v = Value(shape=(2,), stride=(1,))
    g = ec.Graph(inputs=(Input("x"),), nodes=(ec.Node(("y",), "aten.neg.default", (ec.Ref("x"),)),),
                 outputs=(Output("y"), Output("c")), values={"x": v, "y": v},
                 constants={"c": ec.Constant("c", torch.ones(2))})
    gm = ec.to_fx(g)
    assert ec.from_fx(gm) == g and gm.code.index("self.c") > gm.code.index("neg")
