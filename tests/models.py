"""Small models for the integration suite: real architectures at toy sizes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=8):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))


class Block(nn.Module):
    """Pre-norm transformer block: LayerNorm, causal multi-head attention, LayerNorm, GELU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class HandAttentionBlock(nn.Module):
    """A transformer block with its attention written out, as many models do: scores divided by sqrt(head dim),
    under `causal` a mask added from a buffer, softmax; LayerNorm before attention, RMSNorm before the MLP."""

    def __init__(self, d=32, heads=4, ctx=16, causal=False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln, self.rms = nn.LayerNorm(d), RMSNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.full((ctx, ctx), float("-inf")).triu(1))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        if self.causal:
            scores = scores + self.mask[:t, :t]
        x = x + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.rms(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=32, ctx=16, n_blocks=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_blocks))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class BasicBlock(nn.Module):
    """ResNet's basic block as torchvision writes it: two 3x3 conv-BN, in-place ReLUs, a 1x1 conv-BN downsample
    where the shape changes, the identity added in place before the last ReLU."""

    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision's resnet18 (7x7 stem, max pool, four stages of two basic blocks, average pool, linear head, its
    Kaiming initialization), `width` channels in the first stage instead of 64; `blocks` per stage (resnet10's one
    has every kind of block resnet18 has: identity and downsampling, in-place ReLU and add, in half the graph)."""

    def __init__(self, num_classes=10, width=8, blocks=2):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        stages, c_in = [], width
        for i, c in enumerate((width, 2 * width, 4 * width, 8 * width)):
            stage = [BasicBlock(c_in, c, 1 if i == 0 else 2)] + [BasicBlock(c, c) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            c_in = c
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, squeezed):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, squeezed, 1), nn.Conv2d(squeezed, c, 1)

    def forward(self, x):
        s = F.relu(self.reduce(x.mean((2, 3), keepdim=True)))
        return x * F.hardsigmoid(self.expand(s))


class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1x1 expansion, depthwise conv, optional squeeze-excite, 1x1 projection, each with batch
    norm; the input added back when the shape stays."""

    def __init__(self, c_in, c_mid, c_out, kernel, stride, se, act):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c_in, c_mid, 1, bias=False), nn.BatchNorm2d(c_mid), act())
        self.dw = nn.Sequential(nn.Conv2d(c_mid, c_mid, kernel, stride, kernel // 2, groups=c_mid, bias=False),
                                nn.BatchNorm2d(c_mid), act())
        self.se = SqueezeExcite(c_mid, max(8, c_mid // 4)) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(c_mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class MobileNetV3(nn.Module):
    """mobilenetv3_small's layout at toy size: a hardswish stem, three inverted residual blocks (ReLU and hardswish,
    3x3 and 5x5 depthwise, squeeze-excite, one residual), a 1x1 conv head, average pool, hardswish classifier."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 16, 3, 2, True, nn.ReLU),
            InvertedResidual(16, 48, 24, 5, 2, False, nn.Hardswish),
            InvertedResidual(24, 72, 24, 3, 1, True, nn.Hardswish),
        )
        self.head = nn.Sequential(nn.Conv2d(24, 96, 1, bias=False), nn.BatchNorm2d(96), nn.Hardswish())
        self.classifier = nn.Sequential(nn.Linear(96, 128), nn.Hardswish(), nn.Linear(128, num_classes))

    def forward(self, x):
        return self.classifier(self.head(self.blocks(self.stem(x))).mean((2, 3)))
