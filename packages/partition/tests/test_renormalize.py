"""Renormalization chains: a norm's output taken again from its input and statistics with pointwise ops."""

import ember_core
import torch
from ember_core import Graph, Input, JointGraph, Node, Output, Ref, Value
from ember_partition import MinCutPartitioner
from ember_partition._renormalize import renormalize


def chain_nodes(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if "renormalizes" in n.meta]


def test_layer_norm_gets_a_chain_and_its_readers_follow(block):
    joint = block("layernorm_attention").joint
    expanded = renormalize(joint)
    ops = [n.op for n in chain_nodes(expanded.joint.graph)]
    assert ops == ["aten.sub.Tensor", "aten.mul.Tensor", "aten.mul.Tensor", "aten.add.Tensor"]
    (end, out), = expanded.stands_for.items()
    readers = [n for n in expanded.joint.graph.nodes if Ref(out) in n.args]
    assert readers == [] and ember_core.verify(expanded.joint.graph)


def test_chain_computes_the_norm_output_with_the_layout_it_claims(block):
    for name in ("layernorm_attention", "conv_bn_relu"):
        traced = block(name)
        expanded = renormalize(traced.joint)
        graph = expanded.joint.graph
        probe = graph.replace(outputs=tuple(Output(v) for v in sorted(expanded.chain_values)) +
                              tuple(Output(o) for o in expanded.stands_for.values()))
        got = dict(zip([o.name for o in probe.outputs], ember_core.interpret(probe, traced.inputs)))
        for end, out in expanded.stands_for.items():
            torch.testing.assert_close(got[end], got[out])
        for v in expanded.chain_values:
            assert tuple(got[v].shape) == graph.values[v].shape and tuple(got[v].stride()) == graph.values[v].stride


def test_batch_norm_statistics_are_unsqueezed_per_channel(block):
    expanded = renormalize(block("conv_bn_relu").joint)
    unsqueezes = [n for n in chain_nodes(expanded.joint.graph) if n.op == "aten.unsqueeze.default"]
    assert len(unsqueezes) == 8  # mean, rstd, weight, bias: [C] -> [C, 1, 1] against [N, C, H, W]


def bn_joint(training: bool, stats_dtype: str = "float32") -> JointGraph:
    f4 = lambda dtype="float32": Value(dtype=dtype, shape=(4,), stride=(1,))  # noqa: E731
    x = Value(shape=(2, 4, 3, 3), stride=(36, 9, 3, 1))
    values = {"x": x, "w": f4(), "b": f4(), "rm": f4(), "rv": f4(), "out": x, "mean": f4(stats_dtype),
              "rstd": f4(stats_dtype), "nrm": f4(), "nrv": f4(), "y": x}
    bn = Node(("out", "mean", "rstd", "nrm", "nrv"), "aten._native_batch_norm_legit_functional.default",
              (Ref("x"), Ref("w"), Ref("b"), Ref("rm"), Ref("rv"), training, 0.1, 1e-5))
    relu = Node(("y",), "aten.relu.default", (Ref("out"),))
    graph = Graph("bn", tuple(Input(n) for n in ("x", "w", "b", "rm", "rv")), (bn, relu), (Output("y"),), values)
    return JointGraph(graph, 5, 1)


def test_eval_mode_and_mixed_dtypes_get_no_chain():
    assert renormalize(bn_joint(training=True)).stands_for
    assert not renormalize(bn_joint(training=False)).stands_for
    assert not renormalize(bn_joint(training=True, stats_dtype="float64")).stands_for


def test_forward_keeps_the_norm_output_and_backward_runs_the_chain(block, check):
    traced = block("layernorm_attention")
    part = MinCutPartitioner().partition(traced.joint)
    assert not chain_nodes(part.forward)
    assert chain_nodes(part.backward) and all(n.meta["recomputed"] == "1" for n in chain_nodes(part.backward))
    norm = next(n for n in part.forward.nodes if n.op == "aten.native_layer_norm.default")
    assert norm.outputs[0] not in part.saved  # the backward takes it again from the input, mean and rstd
    check(traced, part)


def test_conv_bn_relu_saves_the_convolution_and_statistics_only(block):
    part = MinCutPartitioner().partition(block("conv_bn_relu").joint)
    big = [s.name for s in part.report.saved if not s.free and s.nbytes > 64]
    assert big == ["convolution"]


def test_norm_of_a_norm_reads_the_first_chain(trace, check):
    def fn(x, w1, b1, w2, b2):
        layer_norm = torch.nn.functional.layer_norm
        return layer_norm(layer_norm(x, (8,), w1, b1), (8,), w2, b2).sin()

    traced = trace(fn, [torch.randn(*s, requires_grad=True) for s in [(4, 8), (8,), (8,), (8,), (8,)]])
    expanded = renormalize(traced.joint)
    first_end, second_end = expanded.stands_for
    second_norm = next(n for n in expanded.joint.graph.nodes if n.op == "aten.native_layer_norm.default"
                       and n.outputs[0] == expanded.stands_for[second_end])
    assert second_norm.args[0] == Ref(first_end)
    check(traced, MinCutPartitioner().partition(traced.joint))
