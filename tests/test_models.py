"""Real architectures through ember, forward and backward, against eager."""

from __future__ import annotations

import copy

import ember
import pytest
import torch
from conftest import assert_same_training_step, grads_of, skip_low_precision_on_the_triton_interpreter
from ember_core.testing import FallbackRecorder
from models import MLP, Block, HandAttentionBlock, SmallCNN, TinyGPT


def opts(frontend):
    return {"frontend": frontend}


def test_mlp_forward_and_backward(frontend):
    model = MLP()
    compiled = ember.compile(model, options=opts(frontend))
    assert_same_training_step(model, compiled, [torch.randn(4, 16, requires_grad=True)])


def test_cnn_with_batchnorm_in_train_mode_updates_running_stats(frontend):
    model = SmallCNN().train()
    twin = copy.deepcopy(model)
    compiled = ember.compile(model, options=opts(frontend))
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(compiled(x), twin(x))
    torch.testing.assert_close(model.bn1.running_mean, twin.bn1.running_mean)
    torch.testing.assert_close(model.bn2.running_var, twin.bn2.running_var)
    assert int(model.bn1.num_batches_tracked) == int(twin.bn1.num_batches_tracked) == 1


def test_cnn_backward_matches_eager(frontend):
    model = SmallCNN().train()
    compiled = ember.compile(copy.deepcopy(model), options=opts(frontend))
    x = torch.randn(2, 3, 8, 8)
    model(x).sum().backward()
    compiled(x).sum().backward()
    for e, c in zip(grads_of(model.parameters()), grads_of(compiled.parameters())):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


def test_cnn_in_eval_mode(frontend):
    model = SmallCNN().eval()
    compiled = ember.compile(model, options=opts(frontend))
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_transformer_block_with_attention_and_layernorm(frontend):
    model = Block()
    compiled = ember.compile(model, options=opts(frontend))
    assert_same_training_step(model, compiled, [torch.randn(2, 8, 32, requires_grad=True)])


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_attention_written_out_trains_as_cpp(frontend, causal):
    """Scores divided by sqrt(d) then softmax: every loop of the softmax kernel divides by the same constant (its
    C++ once declared that reciprocal twice and the forward ran in the interpreter), layer norm and RMSNorm."""
    model = HandAttentionBlock(causal=causal)
    compiled = ember.compile(model, options=opts(frontend))
    with FallbackRecorder() as fallbacks, ember.record_events() as rec:
        assert_same_training_step(model, compiled, [torch.randn(2, 8, 32, requires_grad=True)])
    fallbacks.check(allowed=())
    compiled_by = [e.get("codegen") for e in rec.kinds("graph_compiled")]  # the in-process cache may serve some
    assert compiled_by and "interpreter" not in compiled_by, compiled_by  # cpp, or triton when the suite asks


def test_attention_scaled_by_a_dynamic_head_size(frontend):
    """`q.shape[-1] ** -0.5` under dynamic shapes is a symbolic float the kernels compute from the size."""
    def attention(q, k, v):
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        return scores.softmax(-1) @ v

    compiled = ember.compile(attention, dynamic=True, options=opts(frontend))
    for t, d in ((8, 16), (11, 24)):
        q, k, v = (torch.randn(2, 3, t, d) for _ in range(3))
        with FallbackRecorder() as fallbacks:
            torch.testing.assert_close(compiled(q, k, v), attention(q, k, v))
        fallbacks.check(allowed=())


@pytest.mark.parametrize("block", [Block, HandAttentionBlock])
def test_transformer_blocks_train_in_bfloat16(frontend, block):
    skip_low_precision_on_the_triton_interpreter()
    model = block().to(torch.bfloat16)
    compiled = ember.compile(model, options=opts(frontend))
    with FallbackRecorder() as fallbacks:
        assert_same_training_step(model, compiled, [torch.randn(2, 8, 32, dtype=torch.bfloat16, requires_grad=True)],
                                  rtol=3e-2, atol=3e-2)
    fallbacks.check(allowed=())


def test_tiny_gpt_loss_and_grads(frontend):
    model = TinyGPT()
    compiled = ember.compile(model, options=opts(frontend))
    idx, targets = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    eager_loss = model(idx, targets)
    eager_loss.backward()
    eager_grads = grads_of(model.parameters())
    model.zero_grad(set_to_none=True)
    loss = compiled(idx, targets)
    loss.backward()
    torch.testing.assert_close(loss, eager_loss)
    for e, c in zip(eager_grads, grads_of(model.parameters())):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


def test_twenty_adam_steps_match_eager_losses(frontend):
    torch.manual_seed(0)
    eager_model = MLP()
    ember_model = copy.deepcopy(eager_model)
    compiled = ember.compile(ember_model, options=opts(frontend))
    x, y = torch.randn(8, 16), torch.randn(8, 8)
    data = [(x, y)] * 20  # one batch, so the loss must fall

    def train(model, fn):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for x, y in data:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(fn(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    eager_losses, ember_losses = train(eager_model, eager_model), train(ember_model, compiled)
    torch.testing.assert_close(torch.tensor(ember_losses), torch.tensor(eager_losses), rtol=1e-4, atol=1e-5)
    assert ember_losses[-1] < ember_losses[0]


def test_torch_compile_with_backend_ember():
    model = MLP()
    compiled = torch.compile(model, backend="ember")
    assert_same_training_step(model, compiled, [torch.randn(4, 16, requires_grad=True)])


def test_torch_compile_backend_ember_passes_options():
    model = MLP()
    with ember.record_events() as rec:
        torch.compile(model, backend="ember", options={"codegen.cpu": "interpreter"})(torch.randn(2, 16))
    assert any(e.kind == "graph_compiled" and "interpreter" in e.message for e in rec.events)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_modes_on_the_cpu_train_equal_to_eager(frontend, mode):
    """The modes are options the codegens read: on the CPU reduce-overhead records no CUDA graph (the graph keeps
    its codegen's fast path), and training still equals eager."""
    model = Block()
    with ember.record_events() as rec:
        compiled = ember.compile(model, mode=mode, options={"frontend": frontend})
        assert_same_training_step(model, compiled, [torch.randn(2, 8, 32, requires_grad=True)])
    codegens = {e.get("codegen") for e in rec.kinds("graph_compiled")}
    assert codegens and not any("cudagraphs" in c for c in codegens), codegens  # cpp, or triton when configured
    assert not rec.kinds("cuda_graph_recorded")
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]
