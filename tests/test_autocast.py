"""Autocast is applied once. The captured graph holds autocast's casts; at 045a3fc ember traced the joint graph and
ran the compiled graphs with the caller's autocast still on, so every op on autocast's lists was cast again: a region
the model runs under `autocast(enabled=False)` was computed in bf16 (forward and gradients 3-50x further from fp32
than eager's), and under `no_grad` the C++ kernels read an extern's bf16 result as float (NaN).

Each check compares ember with eager under the same autocast, and both with an fp32 run: ember's error against fp32
may be at most 3x eager's (plus a floor of a few bf16 roundings where eager's is near zero)."""

from __future__ import annotations

import copy

import ember
import pytest
import torch
import torch.nn.functional as F
from torch import nn

DTYPES = [torch.bfloat16, torch.float16]


class RoPE(nn.Module):
    """The issue's reproduction: rotary frequencies computed in float32 inside `autocast(enabled=False)`."""

    def __init__(self, dim=128):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim), persistent=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, pos):
        with torch.autocast(x.device.type, enabled=False):
            freqs = (self.inv_freq[None, :, None] @ pos[None, None, :].float()).transpose(1, 2)
            cos = torch.cat([freqs, freqs], -1).cos()
        return self.proj(x) * cos


class LlamaBlock(nn.Module):
    """Llama-style: RMS norm, attention with rotary embeddings computed in float32 (autocast off), SwiGLU MLP."""

    def __init__(self, d=64, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up, self.down = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False), \
            nn.Linear(hidden, d, bias=False)
        half = d // heads
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, half, 2).float() / half), persistent=False)

    def rotary(self, t, pos):
        with torch.autocast(t.device.type, enabled=False):
            freqs = (self.inv_freq[None, :, None] @ pos[None, None, :].float()).transpose(1, 2)
            emb = torch.cat([freqs, freqs], -1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]
            t = t.float()
            a, b = t.chunk(2, -1)
            return t * cos + torch.cat([-b, a], -1) * sin

    def forward(self, x, pos):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q, pos), self.rotary(k, pos)
        att = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        x = x + self.out(att.transpose(1, 2).reshape(b, n, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rel(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def assert_as_accurate(name, got, eager, fp32, floor):
    """got (ember under autocast) vs eager (the same autocast) and fp32: at most 3x eager's error against fp32."""
    e_eager, e_got = rel(eager, fp32), rel(got, fp32)
    assert e_got <= 3 * e_eager + floor, f"{name}: ember is {e_got:.2e} from fp32, eager {e_eager:.2e}"


def floor_of(dtype):
    return 4 * torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_issues_reproduction_is_as_accurate_as_eager(frontend, dtype):
    torch.manual_seed(0)
    m = RoPE()
    x, pos = torch.randn(1, 512, 128), torch.arange(512)
    fp32 = m(x, pos).detach()
    with torch.autocast("cpu", dtype=dtype):
        eager = m(x, pos).detach()
        got = ember.compile(m, options={"frontend": frontend})(x, pos).detach()
        assert got.dtype == eager.dtype
        assert_as_accurate("training-mode forward", got, eager, fp32, floor_of(dtype))
        with torch.no_grad():
            got = ember.compile(m, options={"frontend": frontend})(x, pos)
    assert torch.isfinite(got).all(), "no_grad under autocast read an extern's result as the wrong dtype"
    assert_as_accurate("no_grad forward", got, eager, fp32, floor_of(dtype))


def train_step(model, x, pos, dtype):
    """Loss, output and every parameter's gradient of one step; under autocast of `dtype` (None: fp32)."""
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = model(x, pos)
        loss = out.float().square().mean()
    loss.backward()
    grads = {n.removeprefix("_orig_mod."): p.grad.detach().clone() for n, p in model.named_parameters()}
    return out.detach().float(), grads


@pytest.mark.parametrize("dtype, options", [
    (torch.bfloat16, {}), (torch.float16, {}),
    (torch.bfloat16, {"autograd": "eager"}), (torch.bfloat16, {"compiled_autograd": True}),
], ids=["bf16", "fp16", "bf16-eager-autograd", "bf16-compiled-autograd"])
def test_a_llama_block_trains_under_autocast_as_accurately_as_eager(frontend, dtype, options):
    if options.get("compiled_autograd") and frontend == "trace":
        pytest.skip("compiled autograd goes with the dynamo frontend")
    torch.manual_seed(0)
    model = LlamaBlock()
    x, pos = torch.randn(2, 16, 64), torch.arange(496, 512)  # late positions: large angles, bf16 cannot hold them
    fp32_out, fp32_grads = train_step(model, x, pos, None)
    eager_out, eager_grads = train_step(model, x, pos, dtype)
    compiled = ember.compile(copy.deepcopy(model), options={"frontend": frontend, **options})
    for _ in range(2):  # the second step runs what the first compiled
        out, grads = train_step(compiled, x, pos, dtype)
        assert_as_accurate("output", out, eager_out, fp32_out, floor_of(dtype))
        for name, g in grads.items():
            assert g.dtype == eager_grads[name].dtype, name
            assert_as_accurate(f"grad of {name}", g, eager_grads[name], fp32_grads[name], floor_of(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("freezing", [False, True], ids=["plain", "frozen"])
def test_a_llama_block_infers_under_autocast_as_accurately_as_eager(frontend, dtype, freezing):
    torch.manual_seed(0)
    model = LlamaBlock().eval()
    x, pos = torch.randn(2, 16, 64), torch.arange(496, 512)  # late positions: large angles, bf16 cannot hold them
    with torch.no_grad():
        fp32 = model(x, pos)
        with torch.autocast("cpu", dtype=dtype):
            eager = model(x, pos)
            compiled = ember.compile(copy.deepcopy(model), options={"frontend": frontend, "freezing": freezing})
            for _ in range(2):
                got = compiled(x, pos)
                assert got.dtype == eager.dtype
                assert_as_accurate("output", got.float(), eager.float(), fp32, floor_of(dtype))


def test_a_graph_captured_without_autocast_is_not_reused_under_it(frontend):
    """The frontends guard on the autocast state: the same call under autocast computes in its dtype, as eager."""
    f = ember.compile(lambda x, w: torch.relu(x @ w), options={"frontend": frontend})
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    assert f(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = f(x, w)
        want = torch.relu(x @ w)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
    assert f(x, w).dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_llama_block_trains_under_cuda_autocast_as_accurately_as_eager(frontend, dtype):
    torch.manual_seed(0)
    model = LlamaBlock().cuda()
    x, pos = torch.randn(2, 16, 64, device="cuda"), torch.arange(496, 512, device="cuda")
    fp32_out, fp32_grads = train_step(model, x, pos, None)
    eager_out, eager_grads = train_step(model, x, pos, dtype)
    compiled = ember.compile(copy.deepcopy(model), options={"frontend": frontend})
    for _ in range(2):
        out, grads = train_step(compiled, x, pos, dtype)
        assert_as_accurate("output", out, eager_out, fp32_out, floor_of(dtype))
        for name, g in grads.items():
            assert_as_accurate(f"grad of {name}", g, eager_grads[name], fp32_grads[name], floor_of(dtype))
