from __future__ import annotations

import torch
import torch.nn.functional as F
from _freezing_graphs import ops, run_frozen, traced
from ember_core import interpret
from ember_runtime.freezing import fold_batch_norm, freeze, freeze_params


def _bn_stats(c: int) -> list[torch.Tensor]:
    return [torch.rand(c) + 0.5, torch.randn(c), torch.randn(c), torch.rand(c) + 0.5]  # gamma, beta, mean, var


def conv_bn(x, w, b, gamma, beta, mean, var):
    return F.batch_norm(F.conv2d(x, w, b, padding=1), mean, var, gamma, beta, training=False, eps=1e-3)


def linear_bn(x, w, b, gamma, beta, mean, var):
    return F.batch_norm(F.linear(x, w, b), mean, var, gamma, beta, training=False)


def test_batch_norm_folds_into_convolution():
    args = [torch.randn(2, 3, 6, 6), torch.randn(8, 3, 3, 3), torch.randn(8), *_bn_stats(8)]
    result = freeze(traced(conv_bn, *args, params=tuple(range(1, 7))), args, prepack=False)
    assert result.counts["folded_batch_norms"] == 1
    assert ops(result.graph) == ["aten.convolution.default"]
    torch.testing.assert_close(run_frozen(result, args)[0], conv_bn(*args), rtol=1e-4, atol=1e-4)


def test_batch_norm_folds_into_linear():
    args = [torch.randn(4, 6), torch.randn(5, 6), torch.randn(5), *_bn_stats(5)]
    result = freeze(traced(linear_bn, *args, params=tuple(range(1, 7))), args, prepack=False)
    assert result.counts["folded_batch_norms"] == 1
    assert ops(result.graph) == ["aten.addmm.default"]
    torch.testing.assert_close(run_frozen(result, args)[0], linear_bn(*args), rtol=1e-4, atol=1e-4)


def test_batch_norm_over_user_statistics_stays():
    args = [torch.randn(2, 3, 6, 6), torch.randn(8, 3, 3, 3), torch.randn(8), *_bn_stats(8)]
    result = freeze(traced(conv_bn, *args, params=(1, 2, 3, 4)), args, prepack=False)  # mean, var: user inputs
    assert result.counts["folded_batch_norms"] == 0
    torch.testing.assert_close(run_frozen(result, args)[0], conv_bn(*args), rtol=1e-4, atol=1e-4)


def test_convolution_read_twice_keeps_its_batch_norm():
    def f(x, w, b, gamma, beta, mean, var):
        y = F.conv2d(x, w, b, padding=1)
        return F.batch_norm(y, mean, var, gamma, beta, training=False) + y

    args = [torch.randn(2, 3, 6, 6), torch.randn(8, 3, 3, 3), torch.randn(8), *_bn_stats(8)]
    result = freeze(traced(f, *args, params=tuple(range(1, 7))), args, prepack=False)
    assert result.counts["folded_batch_norms"] == 0
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


def test_size_queries_of_the_convolution_read_the_folded_result():
    """Under dynamic shapes capture asks the convolution's sizes (`aten.sym_size`); they are the batch norm's too."""
    from ember_core import Node, Ref

    args = [torch.randn(2, 3, 6, 6), torch.randn(8, 3, 3, 3), torch.randn(8), *_bn_stats(8)]
    graph = traced(conv_bn, *args, params=tuple(range(1, 7)))
    conv = graph.nodes[0].outputs[0]
    size = Node(("h",), "aten.sym_size.int", (Ref(conv), 2))
    graph = graph.replace(nodes=(graph.nodes[0], size, *graph.nodes[1:]),
                          values={**graph.values, "h": graph.values[conv].replace(type="sym", dtype="int64",
                                                                                  shape=(), stride=())})
    folded, count = fold_batch_norm(freeze_params(graph, args, range(1, 7)))
    assert count == 1
    assert folded.nodes[1] == size.replace(args=(Ref(folded.nodes[0].outputs[0]), 2))
    torch.testing.assert_close(interpret(folded, args[:1])[0], conv_bn(*args), rtol=1e-4, atol=1e-4)
