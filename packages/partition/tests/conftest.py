"""Joint graphs for the tests, built with ember-core's reference tracer (`ember_core.testing.trace_joint`: make_fx
of the function and `torch.autograd.grad` under functionalization, with the `JointGraph` layout stamped), so the
tests need only ember-core and ember-partition.

Fixtures: `trace` (the builder), `block` (a zoo block by name), `check_partition` (runs joint vs. forward then
backward and compares). Tests asking for `block_name` run over the whole zoo, raw and decomposed.
"""

from __future__ import annotations

import functools

import ember_core
import pytest
import torch
import torch.nn as nn
from ember_core.testing import JointCase, assert_partition_layout, assert_same_results, trace_joint

# ---------------------------------------------------------------------------------------------- the zoo


def module_block(module: nn.Module, *inputs: torch.Tensor):
    """`fn(*inputs, *params, *buffers)` calling `module` functionally, its primals and their kinds."""
    params, buffers = dict(module.named_parameters()), dict(module.named_buffers())
    names = [*params, *buffers]

    def fn(*args):
        state = dict(zip(names, args[len(inputs):]))
        return torch.func.functional_call(module, state, args[:len(inputs)])

    primals = [*inputs, *(p.detach().requires_grad_() for p in params.values()), *(b.clone() for b in buffers.values())]
    kinds = ["user"] * len(inputs) + ["param"] * len(params) + ["buffer"] * len(buffers)
    return fn, primals, kinds


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class LayerNormAttention(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.ln, self.attn = nn.LayerNorm(d), Attention(d, heads)

    def forward(self, x):
        return x + self.attn(self.ln(x))


class GPTBlock(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class BasicBlock(nn.Module):
    def __init__(self, c: int = 4):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.bn1(self.conv1(x)).relu()
        return (self.bn2(self.conv2(y)) + x).relu()


def _inplace(x, w):
    y = x * w
    y.mul_(2)
    y.add_(1)
    return y.sin()


def _dropout(x, w):
    return nn.functional.dropout(x * w, p=0.5, training=True).relu().sum(dim=1)


def _zoo(name: str):
    torch.manual_seed(0)
    rand = lambda *shape, grad=False: torch.randn(*shape, requires_grad=grad)  # noqa: E731
    if name == "cos_cos":
        return (lambda x: torch.cos(torch.cos(x))), [rand(8, 16, grad=True)], None
    if name == "gelu_mlp":
        return module_block(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)), rand(8, 16))
    if name == "layernorm_attention":
        return module_block(LayerNormAttention(), rand(2, 8, 16, grad=True))
    if name == "conv_bn_relu":
        conv_bn_relu = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        return module_block(conv_bn_relu, rand(2, 3, 6, 6))
    if name == "resnet_block":
        return module_block(BasicBlock(), rand(2, 4, 6, 6, grad=True))
    if name == "gpt_block":
        return module_block(GPTBlock(), rand(2, 8, 16, grad=True))
    if name == "dropout":
        return _dropout, [rand(8, 16, grad=True), rand(16, grad=True)], None
    if name == "inplace":
        return _inplace, [rand(8, 16, grad=True), rand(16, grad=True)], None
    raise KeyError(name)


ZOO = ("cos_cos", "gelu_mlp", "layernorm_attention", "conv_bn_relu", "resnet_block", "gpt_block", "dropout", "inplace")


@functools.cache
def zoo_block(name: str, decompose: bool = False, functional: bool = True) -> JointCase:
    fn, primals, kinds = _zoo(name)
    return trace_joint(fn, primals, kinds, decompose=decompose, functional=functional, name=name)


# ---------------------------------------------------------------------------------------------- running


def check_partition(traced: JointCase, partition: ember_core.Partition) -> None:
    """The partition computes what the joint computes, and both halves keep the `Partition` layout (the checks of
    ember-core's partitioner kit; a report is not required here)."""
    assert_partition_layout(traced.joint, partition, require_report=False)
    assert_same_results(traced, partition)


@pytest.fixture
def trace():
    return trace_joint


@pytest.fixture
def block():
    return zoo_block


@pytest.fixture
def zoo():
    """`zoo(name) -> (fn, primals, kinds)`: a zoo block before tracing."""
    return _zoo


@pytest.fixture
def check():
    return check_partition


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "block_name" in metafunc.fixturenames:
        metafunc.parametrize("block_name", ZOO)
    if "decompose" in metafunc.fixturenames:
        metafunc.parametrize("decompose", [False, True], ids=["aten", "decomposed"])
