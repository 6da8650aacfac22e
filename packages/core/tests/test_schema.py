"""The in-memory schema: frozen records, functional updates, argument references, constant equality."""

import dataclasses

import ember_core as ec
import pytest
import torch
from ember_core import SCHEMA_VERSION, Constant, Graph, Input, Node, Output, Ref, Sym, Value, graph_device, rename_reads
from ember_core.graph._schema import INPUT_KINDS, OUTPUT_KINDS, iter_refs, node_refs


def test_records_are_frozen():
    node = Node(("v1",), "aten.neg.default", (Ref("x"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = "aten.abs.default"  # type: ignore[misc]


def test_replace_returns_an_updated_copy():
    v = Value(shape=(2, 3), stride=(3, 1))
    w = v.replace(dtype="float16")
    assert (v.dtype, w.dtype, w.shape) == ("float32", "float16", (2, 3))


def test_defaults_describe_a_user_input_and_output():
    assert Input("x") == Input("x", "user", False)
    assert Output("y") == Output("y", "user", None)
    assert Graph().version == SCHEMA_VERSION


def test_user_outputs_keep_user_and_alias_kinds():
    g = Graph(outputs=(Output("a"), Output("b", "mutation", 0), Output("c", "alias", 0), Output("d", "saved")))
    assert [o.name for o in g.user_outputs] == ["a", "c"]


def test_input_names_follow_input_order():
    assert Graph(inputs=(Input("b"), Input("a"))).input_names == ("b", "a")


def test_iter_refs_looks_inside_lists_and_dicts():
    arg = (Ref("a"), 2, (Ref("b"), Sym("s0")), {"k": Ref("c")})
    assert list(iter_refs(arg)) == ["a", "b", "c"]


def test_node_refs_reads_args_then_kwargs():
    node = Node(("y",), "aten.add.Tensor", (Ref("a"),), {"other": Ref("b")})
    assert list(node_refs(node)) == ["a", "b"]


def test_constants_compare_by_content():
    a = Constant("c", torch.tensor([1.0, 2.0]))
    assert a == Constant("c", torch.tensor([1.0, 2.0]))
    assert a != Constant("c", torch.tensor([1.0, 3.0]))
    assert a != Constant("c", torch.tensor([1, 2]))
    assert a != Constant("d", torch.tensor([1.0, 2.0]))


def test_empty_constants_compare_by_shape_and_dtype():
    assert Constant("c", torch.empty(0, 3)) == Constant("c", torch.empty(0, 3))
    assert Constant("c", torch.empty(0, 3)) != Constant("c", torch.empty(3, 0))


def test_graphs_with_equal_constants_are_equal():
    g = Graph(constants={"c": Constant("c", torch.ones(2))})
    assert g == Graph(constants={"c": Constant("c", torch.ones(2))})


def test_graph_str_is_the_printed_text():
    g = Graph(name="f", inputs=(Input("x"),), values={"x": Value(shape=(2,), stride=(1,))}, outputs=(Output("x"),))
    assert str(g).splitlines()[1] == "def f(x: f32[2]):"


def test_kind_tuples_name_every_kind_once():
    assert len(set(INPUT_KINDS)) == len(INPUT_KINDS) and "user" in INPUT_KINDS
    assert {"mutation", "alias", "grad", "saved", "user"} == set(OUTPUT_KINDS)


def test_rename_reads_renames_every_read_inside_lists_and_kwargs_but_not_outputs():
    node = Node(("y",), "aten.cat.default", ((Ref("a"), Ref("b")),), {"out": Ref("a")})
    renamed = rename_reads(node, {"a": "c", "y": "z"})
    assert renamed == Node(("y",), "aten.cat.default", ((Ref("c"), Ref("b")),), {"out": Ref("c")})
    assert rename_reads(node, {}) is node


def test_graph_device_is_the_first_tensor_inputs_then_a_constants_then_cpu():
    cuda = Value(shape=(2,), stride=(1,), device="cuda:1")
    g = Graph("g", (Input("n"), Input("x")), (), (Output("x"),), {"n": Value(type="sym", dtype="int64"), "x": cuda})
    assert graph_device(g) == "cuda:1"
    assert graph_device(Graph("e", (), (), (), {})) == "cpu"


def test_a_cpu_number_tensor_first_does_not_make_a_cuda_graph_a_cpu_one():
    """Dynamo passes a float that changed as a 0-d CPU float64 tensor, which may be the first input (a CUDA
    optimizer step under a scheduler: its learning rate). ATen takes it beside CUDA tensors as a number; the graph
    computes on CUDA (it was planned for the CPU, every CUDA op an ATen call)."""
    lr = Value(shape=(), stride=(), dtype="float64")
    cuda = Value(shape=(2,), stride=(1,), device="cuda:0")
    g = Graph("g", (Input("lr"), Input("x")), (), (Output("x"),), {"lr": lr, "x": cuda})
    assert graph_device(g) == "cuda:0"
    only = Graph("h", (Input("lr"),), (), (Output("lr"),), {"lr": lr})
    assert graph_device(only) == "cpu"
    both = Graph("k", (Input("lr"), Input("x")), (), (Output("x"),), {"lr": lr, "x": Value(shape=(2,), stride=(1,))})
    assert graph_device(both) == "cpu"


def test_map_args_applies_to_leaves_and_keeps_the_nesting():
    from ember_core import map_args

    args = (Ref("x"), [1, (Ref("y"), 2.0)], None)
    out = map_args(args, lambda a: Ref(a.name + "!") if isinstance(a, Ref) else a)
    assert out == (Ref("x!"), [1, (Ref("y!"), 2.0)], None)
    assert map_args(3, lambda a: a * 2) == 6


def test_a_constant_holding_nan_equals_itself_and_its_json_round_trip():
    c = Constant("c", torch.tensor([float("nan"), float("inf"), -0.0, 1.0]))
    g = Graph(name="g", inputs=(), nodes=(), outputs=(Output("c"),), values={}, constants={"c": c})
    assert c == c and ec.loads(ec.dumps(g)) == g
    assert c != Constant("c", torch.tensor([float("nan"), torch.finfo(torch.float32).max, 0.0, 1.0]))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.complex64])
def test_constants_of_every_float_dtype_compare_by_value(dtype):
    values = torch.tensor([1.0, float("nan"), -2.0]).to(dtype)
    assert Constant("c", values) == Constant("c", values.clone())
    assert Constant("c", values) != Constant("c", torch.tensor([1.0, float("nan"), 2.0]).to(dtype))


def test_prune_values_drops_what_no_input_or_node_defines():
    from torch.fx.experimental.proxy_tensor import make_fx

    g = ec.from_fx(make_fx(lambda x: (x * 2).sin())(torch.randn(3)))
    assert ec.prune_values(g) is g
    lone = g.replace(nodes=g.nodes[1:], values=g.values)  # the mul's node gone, its value left behind
    kept = ec.prune_values(lone)
    assert set(kept.values) == set(g.values) - set(g.nodes[0].outputs)


@pytest.mark.parametrize("shape, form", [
    ((2, 3, 4, 5), torch.contiguous_format), ((2, 3, 4, 5), torch.channels_last),
    ((2, 3, 4, 5, 6), torch.channels_last_3d), ((7,), torch.contiguous_format), ((), torch.contiguous_format),
    ((2, 1, 4, 5), torch.channels_last), ((0, 3, 0, 5), torch.channels_last)])
def test_memory_format_of_gives_the_strides_back(shape, form):
    t = torch.empty(shape, memory_format=form)
    found = ec.memory_format_of(Value(shape=shape, stride=t.stride()))
    assert found is not None and torch.empty(shape, memory_format=found).stride() == t.stride()


@pytest.mark.parametrize("shape, stride", [
    ((2, 3), (1, 2)),  # transposed
    ((4, 4), (8, 1)),  # a slice's rows
    ((2, 3, 4), (12, 1, 3)),  # channels-last strides but 3-d: no memory format makes them
    ((2, "s0"), ("s0", 1)),  # symbolic
])
def test_memory_format_of_is_none_for_a_layout_no_memory_format_gives(shape, stride):
    assert ec.memory_format_of(Value(shape=shape, stride=stride)) is None


def test_a_value_is_static_when_no_size_or_stride_is_symbolic():
    assert ec.is_static(Value(shape=(2, 3), stride=(3, 1))) and ec.is_static(Value(shape=(), stride=()))
    assert not ec.is_static(Value(shape=("s0", 3), stride=(3, 1)))
    assert not ec.is_static(Value(shape=(2, 3), stride=("s0", 1)))


def test_copy_to_layout_clones_in_the_declared_memory_format_and_runs():
    t = torch.randn(2, 3, 4, 5)
    declared = Value(shape=(2, 3, 4, 5), stride=t.stride())
    copy = ec.copy_to_layout("y", "z", declared, {"stack": "here"})
    assert copy == Node(("z",), "aten.clone.default", (Ref("y"),), {"memory_format": torch.contiguous_format},
                        {"stack": "here"})
    g = Graph(name="g", inputs=(Input("y"),), nodes=(copy,), outputs=(Output("z"),),
              values={"y": declared.replace(stride=(60, 1, 15, 3)), "z": declared})
    ec.verify(g)
    (out,) = ec.interpret(g, [t.contiguous(memory_format=torch.channels_last)])
    assert out.stride() == t.stride()
    torch.testing.assert_close(out, t)
    assert ec.copy_to_layout("y", "z", Value(shape=(2, 3), stride=(1, 2))) is None
