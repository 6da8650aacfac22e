"""Op names: ATen overloads by their printed name, and the closed set of symbolic-size functions."""

import math
import operator

import pytest
import torch
from ember_core import GraphError, is_view_op, may_write, resolve_op
from ember_core.graph._ops import is_sym_op, op_name


def test_aten_overload_resolves_by_name():
    assert resolve_op("aten.mul.Tensor") is torch.ops.aten.mul.Tensor


def test_symbolic_size_functions_resolve():
    assert resolve_op("operator.mul") is operator.mul and resolve_op("math.ceil") is math.ceil
    assert is_sym_op("torch.sym_max") and not is_sym_op("aten.mul.Tensor")


@pytest.mark.parametrize("name,message", [
    ("mul", "expected 'namespace.op.overload'"),
    ("aten.mul.NoSuchOverload", "torch.ops has no such overload"),
    ("nope.mul.Tensor", "torch.ops has no such overload"),
])
def test_unknown_op_says_why(name, message):
    with pytest.raises(GraphError, match=message):
        resolve_op(name)


def test_op_name_of_an_overload_is_its_printed_name():
    assert op_name(torch.ops.aten.add.Tensor) == "aten.add.Tensor" and op_name(operator.floordiv) == "operator.floordiv"


def test_op_name_refuses_other_callables():
    with pytest.raises(GraphError, match="is not an ATen overload"):
        op_name(torch.add)


def test_views_are_read_off_the_schema():
    views = ["aten.permute.default", "aten.slice.Tensor", "aten.view.default", "aten.expand.default",
             "aten.split.Tensor", "aten.reshape.default"]
    others = ["aten.clone.default", "aten.add.Tensor", "aten.add_.Tensor", "aten._unsafe_view.default",
              "operator.mul", "aten.no_such.op"]
    assert [is_view_op(n) for n in views + others] == [True] * len(views) + [False] * len(others)


def test_returned_views_are_the_views_on_the_way_to_an_output():
    from ember_core import from_fx, returned_views
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        y = x.relu()
        return y, y.t()[0], y.t() * 2, (y + 1).view(-1)

    graph = from_fx(make_fx(f)(torch.randn(3, 4)))
    ops = {o: n.op for n in graph.nodes for o in n.outputs}
    found = returned_views(graph)
    assert sorted(ops[v] for v in found) == ["aten.select.int", "aten.t.default", "aten.view.default"]
    assert returned_views(graph, [graph.outputs[3].name]) == {graph.outputs[3].name}


def test_ops_that_may_write_an_argument():
    writes = ["aten.add_.Tensor", "aten.copy_.default", "aten.index_put_.default", "aten.mul.out", "aten.no_such_op"]
    pure = ["aten.add.Tensor", "aten.mm.default", "aten.permute.default", "operator.mul", "aten.sym_size.int"]
    assert [may_write(n) for n in writes + pure] == [True] * len(writes) + [False] * len(pure)
