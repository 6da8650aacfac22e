"""The graph passes after capture (`channels-last`, `pad-gemms`) through the whole pipeline, without a GPU: the
passes registered for CPU graphs (a test plugin, applying them wherever they can), so that Dynamo's and the trace
frontend's graphs go through them, then autograd, partition, lowering and the C++ codegen. Training steps and
inference against eager, and the rewrites seen in the events. `channels-last` is registered for CPU graphs by
default, decided by timing (here made to come out either way). On a GPU `tests/test_gpu.py` runs them where they
are registered."""

from __future__ import annotations

import copy
import uuid

import ember
import pytest
import torch
from conftest import assert_same_training_step
from ember_codegen_triton.graph_passes import PadGemms
from ember_core import get_plugin_manager, hookimpl, reset_plugin_manager
from ember_lowering.codegen import Tuner
from ember_lowering.graph_passes import ChannelsLast
from ember_lowering.graph_passes import _conv_layouts as layouts
from models import SmallCNN
from torch import nn

PASSES = ["channels-last-cpu", "pad-gemms-cpu"]


class CpuPasses:
    @hookimpl
    def ember_register(self, registry):
        registry.add("pass", "channels-last-cpu", ChannelsLast(decide=lambda convs: True), point="post_capture",
                     default=False)
        registry.add("pass", "pad-gemms-cpu", PadGemms(decide=lambda g: True, device_types=("cpu",)),
                     point="post_capture", default=False)


@pytest.fixture
def cpu_passes():
    reset_plugin_manager()
    get_plugin_manager().register(CpuPasses(), name="cpu-passes")
    yield {"passes": PASSES}
    reset_plugin_manager()


class OddWidths(nn.Module):
    """Linear layers whose widths are not multiples of 4 (float32's 16 bytes)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(18, 33), nn.Linear(33, 7)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def applied(rec) -> set[str]:
    return {e.get("pass") for e in rec.kinds("pass_applied")}


def test_a_cnn_trains_and_infers_channels_last_like_eager(cpu_passes, frontend):
    torch.manual_seed(0)
    model = SmallCNN()
    x = torch.randn(4, 3, 12, 12)
    with ember.record_events() as rec:
        compiled = ember.compile(model, options={**cpu_passes, "frontend": frontend})
        assert_same_training_step(model, compiled, [x], rtol=1e-4, atol=1e-5)
        model.eval()
        frozen = ember.compile(copy.deepcopy(model), options={**cpu_passes, "frontend": frontend})
        with torch.no_grad():
            got, want = frozen(x), model(x)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert "channels-last-cpu" in applied(rec)
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_layers_of_odd_widths_train_and_infer_padded_like_eager(cpu_passes, frontend):
    torch.manual_seed(0)
    model = OddWidths()
    x = torch.randn(5, 18, requires_grad=True)
    with ember.record_events() as rec:
        compiled = ember.compile(model, options={**cpu_passes, "frontend": frontend})
        assert_same_training_step(model, compiled, [x], rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            got = ember.compile(copy.deepcopy(model), options={**cpu_passes, "frontend": frontend})(x)
    assert got.is_contiguous()
    torch.testing.assert_close(got, model(x).detach(), rtol=1e-5, atol=1e-6)
    assert "pad-gemms-cpu" in applied(rec)
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


@pytest.mark.parametrize("nhwc_faster", [True, False])
def test_by_default_a_cpu_cnn_trains_in_the_layout_its_convolutions_time_faster_in(monkeypatch, nhwc_faster):
    """Default options: the CPU tuner times the convolutions (with their backward: the model trains) and the graph
    runs NHWC only where that came out faster; the training step matches eager's either way."""
    tuner = Tuner(f"channels_last_cpu_{uuid.uuid4().hex}", layouts.PASS_ID, repeats=1, margin=layouts.CPU_MARGIN)
    timed = []

    def fake_time(launch, choice, *rest):
        launch(choice)
        timed.append(choice)
        return 0.5 if (choice == layouts.NHWC) == nhwc_faster else 1.0

    monkeypatch.setattr(tuner, "_time", fake_time)
    monkeypatch.setattr(layouts, "CPU_TUNER", tuner)
    torch.manual_seed(0)
    model = SmallCNN()
    with ember.record_events() as rec:
        compiled = ember.compile(model)
        assert_same_training_step(model, compiled, [torch.randn(4, 3, 12, 12)], rtol=1e-4, atol=1e-5)
    assert sorted(timed) == [layouts.NCHW, layouts.NHWC]
    assert ("channels-last" in applied(rec)) is nhwc_faster
    tuned = [e for e in rec.kinds("kernel_tuned") if e.stage == "channels-last"]
    assert len(tuned) == 1 and "with backward" in tuned[0].message
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]
