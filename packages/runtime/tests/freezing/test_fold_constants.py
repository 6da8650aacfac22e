from __future__ import annotations

import torch
from _freezing_graphs import ops, run_frozen, traced
from ember_runtime.freezing import fold_constants, freeze, freeze_params


def scaled_linear(x, w, s):
    return x @ (w.t() * s).to(torch.float32)


def test_weight_only_work_is_folded_once():
    x, w, s = torch.randn(2, 3), torch.randn(5, 3), torch.randn(5)
    result = freeze(traced(scaled_linear, x, w, s, params=(1, 2)), [x, w, s], prepack=False)
    assert result.counts["folded_constants"] >= 2
    assert ops(result.graph) == ["aten.mm.default"]
    torch.testing.assert_close(run_frozen(result, [x, w, s])[0], scaled_linear(x, w, s))


def test_factories_outputs_and_broadcasts_stay():
    x, w = torch.randn(4, 3), torch.randn(3)

    def f(x, w):
        return x + w.expand(4, 3), w * 2, torch.zeros(3) + x

    graph = freeze_params(traced(f, x, w, params=(1,)), [x, w], [1])
    folded, count = fold_constants(graph)
    assert count == 0
    assert ops(folded) == ops(graph)


def test_random_ops_are_not_folded():
    x, w = torch.randn(3), torch.randn(3)
    graph = freeze_params(traced(lambda x, w: x + torch.rand_like(w), x, w, params=(1,)), [x, w], [1])
    assert fold_constants(graph)[1] == 0
