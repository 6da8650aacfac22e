"""Whole-tensor reductions (`x.sum()`, `x.var()`, a loss) through `ember.compile`, forward and backward: the C++
codegen runs them as chunks of a parallel loop. Results equal eager's at sizes below one chunk, odd sizes and sizes
of many chunks, static and symbolic."""

from __future__ import annotations

import copy

import ember
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

SIZES = (7, 1000, 4099, 100_003)  # the second size compiles with symbolic sizes


def reductions(x, y):
    return ((x * x).sum(), x.mean(), x.var(), x.amax(), x.argmax(), x.abs().max(), x.argmin(),
            F.mse_loss(x, y), F.l1_loss(x, y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_whole_tensor_reductions_and_their_gradients_match_eager(dtype):
    compiled = ember.compile(reductions)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    with ember.record_events() as rec:
        check_sizes(compiled, dtype, tol)
    assert not [e for e in rec.events if e.kind == "fallback"]
    assert any("ember_cn" in e.source for e in rec.events if e.kind == "kernels_generated")  # chunks ran


def check_sizes(compiled, dtype, tol):
    for n in SIZES:
        x = (torch.randn(n) * 2 + 0.5).to(dtype).requires_grad_()
        y = torch.randn(n).to(dtype)
        x_ref = x.detach().clone().requires_grad_()
        got, want = compiled(x, y), reductions(x_ref, y)
        for g, w in zip(got, want):
            assert_close(g, w, **tol)
        weights = (1.0, 2.0, 3.0, 0.5, 0.0, 0.25, 0.0, 1.5, 0.75)
        sum(o.float() * c for o, c in zip(got, weights) if o.is_floating_point()).backward()
        sum(o.float() * c for o, c in zip(want, weights) if o.is_floating_point()).backward()
        assert_close(x.grad, x_ref.grad, **tol)


def test_a_training_loss_over_the_whole_batch_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    ref = copy.deepcopy(model)
    compiled = ember.compile(lambda x, t: F.mse_loss(model(x), t) + model(x).var())
    x, t = torch.randn(512, 64), torch.randn(512, 64)
    loss = compiled(x, t)
    expected = F.mse_loss(ref(x), t) + ref(x).var()
    assert_close(loss, expected)
    loss.backward()
    expected.backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_whole_tensor_results_do_not_depend_on_the_thread_count():
    compiled = ember.compile(lambda x: (x.sum(), x.var(), (x * x).mean()))
    x = torch.rand(3_000_001)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = compiled(x)
        torch.set_num_threads(2)
        two = compiled(x)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, two))
