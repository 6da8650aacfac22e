"""A log_softmax the backward reads is written as its statistics and a pointwise tail, so that the min-cut saves
two numbers per row instead of the whole output (cross-entropy over a vocabulary: the logits' size)."""

import ember_core
import torch
import torch.nn.functional as F
from ember_core import Output
from ember_partition import MinCutPartitioner
from ember_partition._log_softmax_stats import split_log_softmax


def cross_entropy_with_bias(x, b, t):
    return F.cross_entropy(x + b, t)


def inputs(dtype=torch.float32):
    return [torch.randn(16, 40, dtype=dtype), torch.zeros(40, dtype=dtype, requires_grad=True),
            torch.randint(0, 40, (16,))]


def test_cross_entropy_saves_row_statistics_not_the_log_probabilities(trace, check):
    traced = trace(cross_entropy_with_bias, inputs())
    part = MinCutPartitioner().partition(traced.joint)
    big = [s.name for s in part.report.saved if not s.free and s.nbytes >= 16 * 40 * 4]
    assert big == [], part.report.saved
    assert not [n for n in part.forward.nodes if n.op == "aten._log_softmax.default"]
    check(traced, part)


def test_any_number_of_rows_is_split_too(trace, check):
    """Dynamic shapes: a symbolic number of rows leaves the statistics' strides numbers, so the split holds."""
    traced = trace(cross_entropy_with_bias, inputs(), mode="symbolic")
    assert any(not isinstance(n, int) for v in traced.joint.graph.values.values() for n in v.shape)
    part = MinCutPartitioner().partition(traced.joint)
    assert not [n for n in part.forward.nodes if n.op == "aten._log_softmax.default"]
    check(traced, part)


def test_the_split_follows_atens_order_of_operations(trace):
    """(x - max) - log(sum(exp(x - max))), in the order ATen computes it (not x - logsumexp(x), which loses the
    small log-probabilities of large logits)."""
    traced = trace(cross_entropy_with_bias, inputs())
    graph = split_log_softmax(traced.joint).graph
    split = [n for n in graph.nodes if n.meta.get("splits") is not None]
    assert [n.op for n in split] == ["aten.amax.default", "aten.sub.Tensor", "aten.exp.default",
                                     "aten.sum.dim_IntList", "aten.log.default", "aten.sub.Tensor"]
    x, b, t = inputs()
    x = x * 3 + 1000  # logits near 1000: x - logsumexp(x) is off by ~3e-5 here (an ulp of 1000), ATen's order by 1e-6
    probe = graph.replace(outputs=(Output(split[-1].outputs[0]),))
    (got,) = ember_core.interpret(probe, [x, b, t, *traced.inputs[3:]])
    torch.testing.assert_close(got, torch.log_softmax(x + b, 1), rtol=0, atol=1e-5)


def test_bfloat16_and_forward_only_log_softmax_stay_whole(trace):
    for traced in (trace(cross_entropy_with_bias, inputs(torch.bfloat16)),
                   trace(lambda x, w: (x * w).sum() + F.log_softmax(x.detach(), 1).sum().detach(),
                         [torch.randn(4, 8), torch.randn(8, requires_grad=True)])):
        graph = split_log_softmax(traced.joint).graph
        assert not [n for n in graph.nodes if n.meta.get("splits") is not None]
