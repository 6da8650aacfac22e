"""The models and functions the CPU and GPU benchmarks share."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def pointwise_chain(x, y):
    return ((x * 1.5 + y).sigmoid() * x - y).relu()


def transcendental_chain(x, y):
    """The pointwise chain of issue 14: transcendental ops, which cost compute rather than bandwidth."""
    return (x.sin() * y.cos() + (x * 0.5).exp() * torch.erf(y)).tanh()


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class GeluMLP(nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class CrossEntropy(nn.Module):
    """Cross-entropy over logits with a learned bias: a training step's gradient is the softmax's backward and a
    scatter of the targets' gradient (a select in ember), over the whole logits."""

    def __init__(self, classes: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, logits, target):
        return nn.functional.cross_entropy(logits + self.bias, target)


def mlp_train_step_model():
    return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512))


class DecodeStep(nn.Module):
    """One token of a Llama-style decoder against a cache of `cached` earlier tokens: RMSNorm, attention with
    grouped heads over the cache, SwiGLU MLP, per layer. The caches are inputs (as a static KV cache is), so that
    each call is the same graph: the small-batch step `mode="reduce-overhead"` is for."""

    def __init__(self, d=2048, layers=4, heads=16, kv_heads=8, hidden=5632, vocab=32000):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.embed, self.head = nn.Embedding(vocab, d), nn.Linear(d, vocab, bias=False)
        self.layers = nn.ModuleList(nn.ModuleDict({
            "q": nn.Linear(d, d, bias=False), "kv": nn.Linear(d, 2 * d * kv_heads // heads, bias=False),
            "o": nn.Linear(d, d, bias=False), "gate_up": nn.Linear(d, 2 * hidden, bias=False),
            "down": nn.Linear(hidden, d, bias=False)}) for _ in range(layers))
        self.norms = nn.Parameter(torch.ones(2 * layers + 1, d))

    def forward(self, ids, k_cache, v_cache):
        """ids: [B, 1]; k_cache, v_cache: [layers, B, kv_heads, cached, d / heads]. Returns the next logits."""
        x = self.embed(ids)
        b, d = x.shape[0], x.shape[-1]
        dh = d // self.heads
        for n, layer in enumerate(self.layers):
            h = rmsnorm(x, self.norms[2 * n])
            q = layer["q"](h).view(b, 1, self.heads, dh).transpose(1, 2)
            k, v = layer["kv"](h).view(b, 1, 2 * self.kv_heads, dh).transpose(1, 2).chunk(2, dim=1)
            k, v = torch.cat([k_cache[n], k], 2), torch.cat([v_cache[n], v], 2)
            a = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            x = x + layer["o"](a.transpose(1, 2).reshape(b, 1, d))
            gate, up = layer["gate_up"](rmsnorm(x, self.norms[2 * n + 1])).chunk(2, dim=-1)
            x = x + layer["down"](F.silu(gate) * up)
        return self.head(rmsnorm(x, self.norms[-1]))
