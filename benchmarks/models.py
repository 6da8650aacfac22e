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


def mlp_train_step_model():
    return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512))
