"""Softmax and norm lowerings against the reference interpreter."""

import pytest
import torch
import torch.nn.functional as F
from ember_lowering import lower, run_plan
from lowering_checks import check, trace

torch.manual_seed(0)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax_over_any_dim(dim):
    check(lambda x: (torch.softmax(x, dim), torch.log_softmax(x, dim)), torch.randn(5, 6, 7))


def test_softmax_of_half_and_of_masked_rows():
    x = torch.randn(4, 8)
    x[1] = -float("inf")
    x[2, :4] = -float("inf")
    check(lambda x, h: (torch.softmax(x, -1), torch.softmax(h, -1), torch.softmax(h, -1, dtype=torch.float32)),
          x, torch.randn(4, 8).half())


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_over_one_and_two_dims(affine):
    if affine:
        check(lambda x, w, b, w2: (F.layer_norm(x, (7,), w, b, 1e-3), F.layer_norm(x, (6, 7), w2)),
              torch.randn(5, 6, 7), torch.randn(7), torch.randn(7), torch.randn(6, 7))
    else:
        check(lambda x: (F.layer_norm(x, (7,), eps=1e-3), F.layer_norm(x, (6, 7))), torch.randn(5, 6, 7))


def test_layer_norm_stats_outputs_and_half_input():
    x, w, b = torch.randn(4, 16).half(), torch.randn(16).half(), torch.randn(16).half()
    check(lambda x, w, b: torch.ops.aten.native_layer_norm(x, [16], w, b, 1e-5), x, w, b)


def test_rms_norm():
    check(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, torch.randn(4, 16), torch.randn(16))


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(affine):
    params = (torch.randn(6), torch.randn(6)) if affine else ()
    check(lambda x, *wb: (F.group_norm(x, 3, *wb), torch.ops.aten.native_group_norm(x, *(wb or (None, None)), 2, 6,
                                                                                    20, 3, 1e-5)),
          torch.randn(2, 6, 4, 5), *params)


def test_batch_norm_inference_and_training_statistics():
    x, rm, rv, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)
    check(lambda x, rm, rv, w, b: (F.batch_norm(x, rm, rv, w, b, training=False),
                                   F.batch_norm(x, None, None, w, b, training=True),
                                   F.batch_norm(x[:, :, 0, 0], None, None, training=True),
                                   torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)),
          x, rm, rv, w, b)


def test_functional_batch_norm_returns_updated_running_stats():
    x, rm, rv, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)
    check(lambda x, rm, rv, w, b: torch.ops.aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1,
                                                                                       1e-5), x, rm, rv, w, b)


def test_training_batch_norm_with_running_stats_runs_extern():
    x, rm, rv = torch.randn(4, 3), torch.zeros(3), torch.ones(3)
    graph = trace(lambda x, rm, rv: torch.ops.aten.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5), x, rm, rv)
    plan = lower(graph, check=True, emit_event=False)
    assert [e.op for e in plan.externs] == ["aten.native_batch_norm.default"]
    got = run_plan(plan, [x, rm.clone(), rv.clone()])
    torch.testing.assert_close(got[0], F.batch_norm(x, None, None, training=True))


def test_norms_with_symbolic_sizes():
    check(lambda x: (torch.softmax(x, -1), F.layer_norm(x, x.shape[-1:]), torch.log_softmax(x, 0)),
          torch.randn(6, 7), mode="symbolic", others=[(torch.randn(2, 13),)])
