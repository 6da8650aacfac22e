"""Freezing (option `freezing`) against eager: inference graphs with parameters folded in, refrozen when they
change, never touching training."""

from __future__ import annotations

import copy
import importlib

import ember
import pytest
import torch
from ember_core.testing import FallbackRecorder
from torch import nn

ONEDNN = torch.backends.mkldnn.is_available()


@pytest.fixture(autouse=True)
def any_size(monkeypatch):
    """The tests' small convolutions and linear layers go to oneDNN too (`MIN_MACS` keeps real models' small ones
    on ATen, which is faster for them)."""
    prepack = importlib.import_module("ember_runtime.freezing.prepack_weights")
    monkeypatch.setattr(prepack, "MIN_MACS", dict.fromkeys(prepack.MIN_MACS, 0))


def conv_bn_relu(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class ResidualBlock(nn.Module):
    """ResNet's basic block, with a strided 1x1 projection."""

    def __init__(self, c_in: int = 8, c_out: int = 16):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, 2, 1, bias=False), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out)
        self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, 2, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Statistics and affine parameters away from their initial 0/1, so a folding error shows."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)
    return model


def _inference(model: nn.Module) -> nn.Module:
    return _randomize_batch_norms(model).eval().requires_grad_(False)


def _run_frozen(model, x, frontend, **compile_kwargs):
    """The compiled model's output under no_grad against eager's; the `graph_frozen` events. A frozen graph runs
    in the device's codegen, its oneDNN ops as extern calls, with no fallback."""
    compiled = ember.compile(model, options={"frontend": frontend}, **compile_kwargs)
    with torch.no_grad(), ember.record_events() as rec, FallbackRecorder() as fallbacks:
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    fallbacks.check(allowed=())
    if rec.kinds("graph_frozen"):
        assert "interpreter" not in {e.get("codegen") for e in rec.kinds("graph_compiled")}
        plans = "".join(e.source or "" for e in rec.kinds("kernels_planned"))  # none when the plan cache has it
        ops = {n.op for e in rec.kinds("graph_frozen") for n in e.graph.nodes if n.op.startswith("mkldnn.")}
        assert not plans or all(f"= {op}(" in plans for op in ops), plans
    return compiled, rec.kinds("graph_frozen")


def test_conv_bn_relu_net_folds_and_fuses(frontend):
    model = _inference(nn.Sequential(conv_bn_relu(3, 8), conv_bn_relu(8, 8, 2), nn.AdaptiveAvgPool2d(1),
                                     nn.Flatten(), nn.Linear(8, 4)))
    _, [event] = _run_frozen(model, torch.randn(2, 3, 16, 16), frontend)
    assert event.data["folded_batch_norms"] == 2
    if ONEDNN:
        assert event.data["prepacked_weights"] == 3 and event.data["fused_epilogues"] == 2
    assert not any(i.kind in ("param", "buffer") for i in event.graph.inputs)


def test_linear_gelu_mlp(frontend):
    model = _inference(nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16), nn.GELU(approximate="tanh")))
    _, [event] = _run_frozen(model, torch.randn(4, 16), frontend)
    assert event.data["folded_constants"] == 2  # the transposed weights
    if ONEDNN:
        assert [n.op for n in event.graph.nodes] == ["mkldnn._linear_pointwise.default"] * 2


def test_residual_block(frontend):
    _, [event] = _run_frozen(_inference(ResidualBlock()), torch.randn(2, 8, 12, 12), frontend)
    assert event.data["folded_batch_norms"] == 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_a_convolution_the_model_returns_has_eagers_layout(frontend, dtype):
    """oneDNN writes channels-last; the model's output keeps the layout eager gives it (a view of it works)."""
    model = _inference(nn.Sequential(conv_bn_relu(3, 8), nn.Conv2d(8, 6, 3))).to(dtype)
    x = torch.randn(2, 3, 10, 10, dtype=dtype)
    compiled = ember.compile(model, options={"frontend": frontend})
    with torch.no_grad(), FallbackRecorder() as fallbacks:
        got, want = compiled(x), model(x)
    fallbacks.check(allowed=())
    assert got.stride() == want.stride()
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(got.view(2, -1), want.view(2, -1), **tol)


class _Backbone(nn.Module):
    """Returns a feature map and the next stage's result computed from it (a detection backbone's pattern)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 3)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return y, self.b(y) + 1


class _Heads(nn.Module):
    """Views, a concatenation, a dtype cast and a pooling of a packed convolution's result returned: what eager
    returns is laid out after its contiguous activations, and views of a returned value share its storage."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 3)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = self.b(y) + 1
        return (y, y.permute(0, 2, 3, 1), y[:, :4].unsqueeze(0), z.transpose(1, 2), torch.cat([y, y], 1) * 2,
                y.double(), nn.functional.adaptive_avg_pool2d(z, 3), z.flatten(1))


def _shared(outputs) -> list[list[bool]]:
    """Which outputs share storage with which."""
    ptrs = [t.untyped_storage().data_ptr() for t in outputs]
    return [[a == b for b in ptrs] for a in ptrs]


@pytest.mark.parametrize("codegen", ["cpp", "interpreter"])
@pytest.mark.parametrize("module", [_Backbone, _Heads], ids=["backbone", "heads"])
def test_what_a_frozen_graph_returns_is_laid_out_and_aliased_as_eagers(frontend, codegen, module):
    model = _inference(module())
    x = torch.randn(2, 3, 12, 12)
    compiled = ember.compile(model, options={"frontend": frontend, "codegen.cpu": codegen})
    with torch.no_grad(), FallbackRecorder() as fallbacks:
        got, want = compiled(x), model(x)
    fallbacks.check(allowed=())
    assert [g.stride() for g in got] == [w.stride() for w in want]
    assert _shared(got) == _shared(want)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_parameters_changed_after_compile_are_seen(frontend):
    model = _inference(ResidualBlock())
    other = _inference(ResidualBlock())
    x = torch.randn(2, 8, 12, 12)
    compiled, _ = _run_frozen(model, x, frontend)
    with torch.no_grad(), ember.record_events() as rec:
        model.load_state_dict(other.state_dict())
        torch.testing.assert_close(compiled(x), other(x), rtol=1e-4, atol=1e-4)
        model.conv2.weight.add_(0.25)  # in place under no_grad
        model.bn1.running_var.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    reasons = [e.data["reason"] for e in rec.kinds("graph_frozen")]
    assert len(reasons) == 2 and all("written in place" in r for r in reasons), reasons


def test_freezing_off(frontend):
    model = _inference(ResidualBlock())
    compiled = ember.compile(model, options={"frontend": frontend, "freezing": False})
    x = torch.randn(2, 8, 12, 12)
    with torch.no_grad(), ember.record_events() as rec:
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert rec.kinds("graph_frozen") == []


def test_parameters_that_require_grad_are_frozen_only_when_asked(frontend):
    model = _randomize_batch_norms(ResidualBlock()).eval()  # requires grad, used under no_grad
    x = torch.randn(2, 8, 12, 12)
    assert _run_frozen(model, x, frontend)[1] == []
    compiled = ember.compile(model, options={"frontend": frontend, "freezing": True})
    with torch.no_grad(), ember.record_events() as rec:
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert len(rec.kinds("graph_frozen")) == 1


def test_training_is_never_frozen(frontend):
    model = _randomize_batch_norms(ResidualBlock()).train()
    twin = copy.deepcopy(model)
    compiled = ember.compile(model, options={"frontend": frontend, "freezing": True})
    x = torch.randn(2, 8, 12, 12)
    with ember.record_events() as rec:
        compiled(x).sum().backward()
    twin(x).sum().backward()
    assert rec.kinds("graph_frozen") == []
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model.bn1.running_mean, twin.bn1.running_mean)


class RunningScale(nn.Module):
    """Reads nothing but a buffer it updates in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(6))

    def forward(self, x):
        return x - self.running.mul_(0.9).add_(x.mean(0), alpha=0.1)


def test_a_graph_whose_every_buffer_it_writes_is_not_frozen_and_nothing_falls_back(frontend):
    """Under no_grad a graph that reads parameters and buffers only to write them has nothing to freeze: it was
    compiled as a FrozenGraph, which then gave up on its first call with a `fallback` event ("no input can be
    frozen") for a graph that ran compiled all along. Freezing is now not asked for where no input can be frozen."""
    model, twin = RunningScale(), RunningScale()
    compiled = ember.compile(model, options={"frontend": frontend})
    with torch.no_grad(), ember.record_events() as rec:
        for _ in range(2):
            x = torch.randn(4, 6)
            torch.testing.assert_close(compiled(x), twin(x))
    torch.testing.assert_close(model.running, twin.running)
    assert rec.kinds("fallback") == [] and rec.kinds("graph_frozen") == []


def test_inference_mode_and_dynamic_batch(frontend):
    model = _inference(nn.Sequential(conv_bn_relu(3, 8), nn.Flatten(), nn.Linear(8 * 8 * 8, 4), nn.ReLU()))
    compiled = ember.compile(model, dynamic=True, options={"frontend": frontend})
    with torch.inference_mode(), ember.record_events() as rec:
        for batch in (2, 3, 5):
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    events = rec.kinds("graph_frozen")
    assert events and all(e.data["folded_batch_norms"] == 1 for e in events)


@pytest.mark.parametrize("act", [nn.SiLU, nn.Hardswish, nn.ReLU6, nn.Sigmoid, nn.LeakyReLU, nn.GELU])
def test_activations_fused_into_convolution(frontend, act):
    model = _inference(nn.Sequential(nn.Conv2d(4, 8, 3), nn.BatchNorm2d(8), act(), nn.Conv2d(8, 4, 1), act()))
    _, [event] = _run_frozen(model, torch.randn(1, 4, 10, 10), frontend)
    if ONEDNN:
        assert event.data["fused_epilogues"] == 2


def test_running_statistics_updated_in_train_mode_are_seen(frontend):
    """A training-mode batch norm writes its statistics without bumping their version counter."""
    model = _inference(ResidualBlock())
    x = torch.randn(2, 8, 12, 12)
    compiled, _ = _run_frozen(model, x, frontend)
    with torch.no_grad():
        model.train()
        model(x * 3 + 1)  # eager, as a recalibration would
        model.eval()
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_frozen_on_cuda(frontend):
    model = _inference(ResidualBlock()).cuda()
    _, [event] = _run_frozen(model, torch.randn(2, 8, 12, 12, device="cuda"), frontend)
    assert event.data["folded_batch_norms"] == 3 and event.data["prepacked_weights"] == 0


def test_two_models_with_equal_weights_do_not_share_frozen_constants(frontend):
    """A cached build would close over the first model's tensors: a write to them must not reach the second."""
    first = _inference(ResidualBlock())
    second = copy.deepcopy(first)
    x = torch.randn(2, 8, 12, 12)
    compiled_first, _ = _run_frozen(first, x, frontend)
    with torch.no_grad():
        first.bn2.bias.add_(1.0)
        first.down[0].weight.mul_(2.0)
        torch.testing.assert_close(compiled_first(x), first(x), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
    _run_frozen(second, x, frontend)


@pytest.mark.skipif(not ONEDNN, reason="needs oneDNN")
def test_a_flattened_channels_last_activation_runs_in_the_interpreter_codegen(frontend):
    """The packed convolution writes channels-last; the flatten after it was traced as `view` on a contiguous
    value, which ATen cannot do on the new layout. The interpreter codegen (every codegen's fallback) runs the
    graph op by op in ATen, so the frozen graph must say `reshape` there."""
    model = _inference(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 10 * 10, 5)))
    x = torch.randn(2, 3, 12, 12)
    compiled = ember.compile(model, options={"frontend": frontend, "codegen.cpu": "interpreter"})
    with torch.no_grad(), ember.record_events() as rec:
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    frozen = rec.kinds("graph_frozen")
    assert frozen and any(n.op.startswith("mkldnn._convolution") for e in frozen for n in e.graph.nodes)
