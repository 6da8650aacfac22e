"""Long reductions with few results split in two (ember_lowering's `SplitPolicy`, the Triton codegen's choice)
through the whole pipeline, without a GPU: the C++ codegen with a split policy scaled to test sizes (a test
plugin), so that batch norm's statistics and their gradients, layer norms over few long rows and whole-tensor
reductions run split, in training and inference. Against eager, and against float64 (the accuracy contract)."""

from __future__ import annotations

import copy

import ember
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_training_step
from ember_codegen_cpp import CppCodegen
from ember_core import get_plugin_manager, hookimpl, reset_plugin_manager
from ember_core.testing import gradient_errors, too_far
from ember_lowering import Capabilities, SplitPolicy
from models import SmallCNN
from torch import nn


class SplittingCpp(CppCodegen):
    name = "cpp-split"
    capabilities = Capabilities(split_reductions=SplitPolicy(rows=64, min_length=256, min_chunk=32))


class Plugin:
    @hookimpl
    def ember_register(self, registry):
        registry.add("codegen", "cpp-split", SplittingCpp(), priority=0, devices=("cpu",))


@pytest.fixture
def split():
    reset_plugin_manager()
    get_plugin_manager().register(Plugin(), name="split-reductions")
    yield {"codegen.cpu": "cpp-split"}
    reset_plugin_manager()


def reduce_kernels(rec) -> int:
    return sum(1 for e in rec.kinds("kernels_planned") for s in e.get("steps") if s["name"].startswith("reduce"))


class Norms(nn.Module):
    """Batch norms over 8x16x16 values a channel, and a layer norm over two rows of 512."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.bn2 = nn.BatchNorm2d(4)
        self.ln = nn.LayerNorm(512)

    def forward(self, x):
        y = self.bn2(F.relu(self.bn(self.conv(x))))
        return self.ln(y.reshape(2, -1, 512)).sum(1)


def test_split_batch_and_layer_norms_train_like_eager(split):
    torch.manual_seed(0)
    model, x = Norms(), torch.randn(8, 3, 16, 16)
    eager_model = copy.deepcopy(model)
    with ember.record_events() as rec:
        compiled = ember.compile(model, options=split)
        assert_same_training_step(model, compiled, [x.requires_grad_()], rtol=1e-4, atol=1e-5)
    assert not rec.kinds("fallback")
    with ember.record_events() as whole:
        ember.compile(copy.deepcopy(eager_model))(x).sum().backward()
    assert reduce_kernels(rec) > reduce_kernels(whole), "the statistics and their gradients must run split"
    eager_model(x), eager_model(x)  # the step's eager and ember forwards both moved the running statistics
    for name, buf in model.named_buffers():
        torch.testing.assert_close(buf, dict(eager_model.named_buffers())[name], msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_whole_tensor_reductions_match_eager(split, dtype):
    def fn(x):
        return x.sum(), x.float().var(), x.amax(), x.mean(0), (x > 2).any(), x.float().std(0, keepdim=True)

    x = torch.randn(1024, 3).to(dtype)
    with ember.record_events() as rec:
        got = ember.compile(fn, options=split)(x)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    for g, w in zip(got, fn(x)):
        torch.testing.assert_close(g, w, **tol)
    assert not rec.kinds("fallback")


def test_split_gradients_are_within_3x_eagers_error_against_float64(split):
    errors = gradient_errors(SmallCNN(), [torch.randn(16, 3, 16, 16)],
                             lambda m: ember.compile(m, options=split), threads=(1,))
    bad = too_far(errors)
    assert not bad, "\n".join(map(str, bad))
