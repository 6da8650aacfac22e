"""Cutting a joint graph in two along a set of saved values."""

import dataclasses

import ember_core
import torch
from ember_core import JointGraph, Partition, Sym
from ember_partition import analyze
from ember_partition._split import split


def test_layout_follows_the_partition_contract(block):
    joint = block("cos_cos").joint
    cut = split(analyze(joint), ["cos"], producer="test")
    assert cut.forward.input_names == ("primals_1",)
    assert [(o.name, o.kind) for o in cut.forward.outputs] == [
        ("cos_1", "user"), ("primals_1", "saved"), ("cos", "saved")]
    assert [(i.name, i.kind) for i in cut.backward.inputs] == [
        ("primals_1", "saved"), ("cos", "saved"), ("tangents_1", "tangent")]
    assert cut.backward.outputs == joint.graph.outputs[1:]


def test_unused_saved_values_are_dropped_and_read_primals_added(block):
    cut = split(analyze(block("cos_cos").joint), ["cos_1", "cos"], producer="test")
    assert cut.saved == ("primals_1", "cos")  # the backward reads x for sin(x); nobody reads cos_1


def test_forward_nodes_the_backward_needs_unsaved_are_recomputed(block, check):
    traced = block("cos_cos")
    cut = split(analyze(traced.joint), [], producer="test")
    recomputed = [n for n in cut.backward.nodes if n.meta.get("recomputed") == "1"]
    assert [n.outputs for n in recomputed] == [("cos",)]
    assert all(n.meta["region"] == "backward" for n in cut.backward.nodes)
    assert all(n.meta["region"] == "forward" for n in cut.forward.nodes)


def test_mutated_primal_is_saved_as_a_copy_taken_before_the_mutation(trace):
    def fn(x, w, buf):
        y = x * buf * w
        buf.add_(1)
        return y

    primals = [torch.randn(4), torch.randn(4, requires_grad=True), torch.randn(4)]
    traced = trace(fn, primals, ["user", "param", "buffer"])
    cut = split(analyze(traced.joint), [], producer="test")
    assert "primals_3_saved" in cut.saved and "primals_3" not in cut.saved
    fwd = ember_core.interpret(cut.forward, traced.primals)
    before = traced.primals[2].clone()
    traced.primals[2].copy_(fwd[1])  # what a runtime does with the mutation output
    grads = ember_core.interpret(cut.backward, [*fwd[2:], *traced.tangents])
    torch.testing.assert_close(grads[0], traced.tangents[0] * traced.primals[0] * before)


def test_primal_carrying_a_symbol_the_backward_needs_is_saved(trace, check):
    primals = [torch.randn(3, 5, requires_grad=True), torch.randn(7, requires_grad=True)]
    traced = trace(lambda x, y: x.sum() * y, primals, mode="symbolic")
    graph = traced.joint.graph  # write the expand's sizes as symbols, as a graph may: [s0, s1], not sym_size nodes
    dims = tuple(Sym(str(d)) for d in graph.values["primals_1"].shape)
    nodes = [n.replace(args=(n.args[0], dims)) if n.op == "aten.expand.default" else n
             for n in graph.nodes if n.op != "aten.sym_size.int"]
    traced = dataclasses.replace(traced, joint=JointGraph(graph.replace(nodes=tuple(nodes)), 2, 1))
    cut = split(analyze(traced.joint), ["sum_1"], producer="test")
    assert cut.saved == ("primals_1", "primals_2", "sum_1")  # primals_1 only for its shape
    check(traced, Partition(cut.forward, cut.backward, cut.saved))


CHOLESKY_JOINT = """# ember graph v1.0
def g_joint(x: f32[3, 3] requires_grad, tangent_0: f32[3, 3] tangent):
  getitem, getitem_1: f32[3, 3] requires_grad, i32[] = aten.linalg_cholesky_ex.default(x)
  _linalg_check_errors: none:b8 = aten._linalg_check_errors.default(getitem_1, "linalg.cholesky", is_matrix=True)
  mul: f32[3, 3] = aten.mul.Tensor(tangent_0, getitem)  # backward
  return (getitem, mul grad[0])
"""


def test_an_effectful_node_nothing_reads_stays_in_the_forward_graph():
    joint = JointGraph(ember_core.parse_graph(CHOLESKY_JOINT), num_primals=1, num_forward_outputs=1)
    info = analyze(joint)
    assert info.forward_effects == ("_linalg_check_errors",) and info.backward_effects == ()
    for saved in ([], ["getitem"]):
        cut = split(info, saved, producer="test")
        assert [n.op for n in cut.forward.nodes] == ["aten.linalg_cholesky_ex.default",
                                                      "aten._linalg_check_errors.default"]
        assert "aten._linalg_check_errors.default" not in [n.op for n in cut.backward.nodes]
