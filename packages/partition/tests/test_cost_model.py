"""Op classes and recompute cost estimates."""

import pytest
from ember_core import Graph, Node, Ref, Value
from ember_partition import op_class
from ember_partition._cost_model import recompute_flops, written_args


@pytest.mark.parametrize("op, cls", [
    ("aten.mm.default", "expensive"), ("aten.addmm.default", "expensive"), ("aten.convolution.default", "expensive"),
    ("aten._scaled_dot_product_flash_attention_for_cpu.default", "expensive"),
    ("aten.native_dropout.default", "random"), ("aten.rand_like.default", "random"), ("aten.bernoulli.p", "random"),
    ("aten.add_.Tensor", "mutating"), ("aten.copy_.default", "mutating"),
    ("aten.view.default", "view"), ("aten.t.default", "view"), ("aten.split.Tensor", "view"),
    ("aten.detach.default", "view"), ("aten._unsafe_view.default", "view"),
    ("aten.gelu.default", "pointwise"), ("aten.where.self", "pointwise"), ("aten.cat.default", "pointwise"),
    ("aten.full.default", "pointwise"), ("aten.clone.default", "pointwise"),
    ("aten.sum.dim_IntList", "reduction"), ("aten._softmax.default", "reduction"),
    ("aten.native_layer_norm.default", "reduction"), ("aten.sym_size.int", "size"), ("operator.mul", "size"),
    ("aten.native_layer_norm_backward.default", "opaque"), ("aten.no_such_op.default", "opaque"),
])
def test_op_classes(op, cls):
    assert op_class(op) == cls


def graph_of(*nodes: Node, **shapes) -> Graph:
    values = {k: Value(shape=s, stride=(1,) * len(s)) for k, s in shapes.items()}
    return Graph(nodes=nodes, values=values)


def test_pointwise_cost_is_its_output_size():
    node = Node(("y",), "aten.mul.Tensor", (Ref("x"), Ref("x")))
    assert recompute_flops(node, graph_of(node, x=(4, 8), y=(4, 8)), {}) == 32


def test_reduction_cost_counts_inputs_and_outputs():
    node = Node(("y",), "aten.sum.dim_IntList", (Ref("x"), [1]))
    assert recompute_flops(node, graph_of(node, x=(4, 8), y=(4,)), {}) == 36


def test_views_cost_nothing():
    node = Node(("y",), "aten.view.default", (Ref("x"), [32]))
    assert recompute_flops(node, graph_of(node, x=(4, 8), y=(32,)), {}) == 0


def test_written_arguments_come_from_the_schema():
    assert written_args(Node(("z",), "aten.copy_.default", (Ref("a"), Ref("b")))) == ("a",)
    assert written_args(Node(("z",), "aten.add.out", (Ref("a"), Ref("b")), {"out": Ref("c")})) == ("c",)
    assert written_args(Node(("z",), "aten.add.Tensor", (Ref("a"), Ref("b")))) == ()
