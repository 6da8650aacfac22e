"""Joint graphs for the tests, built here with make_fx so the tests need only ember-core and ember-partition.

`trace_joint(fn, primals)` traces `fn` and `torch.autograd.grad` of its outputs (tangents as inputs) under
functionalization, reads the fx graph with `ember_core.from_fx`, and stamps the `JointGraph` layout: input kinds,
`grad` outputs, `mutation` outputs for buffers written in place, and each node's region (forward: the forward
outputs need it).

Fixtures: `trace` (the builder), `block` (a zoo block by name), `check_partition` (runs joint vs. forward then
backward and compares). Tests asking for `block_name` run over the whole zoo, raw and decomposed.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

import ember_core
import pytest
import torch
import torch.nn as nn
from ember_core import Input, JointGraph, Output
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.experimental.proxy_tensor import make_fx


@dataclass
class Traced:
    """A joint graph and real inputs for it: primals, then tangents."""

    joint: JointGraph
    primals: list[torch.Tensor]
    tangents: list[torch.Tensor]

    @property
    def inputs(self) -> list[torch.Tensor]:
        return [*self.primals, *self.tangents]


def _to_fun(t):
    return FunctionalTensor.to_functional(t) if isinstance(t, torch.Tensor) else t


def _from_fun(t):
    if isinstance(t, FunctionalTensor):
        torch._sync(t)
        return torch._from_functional_tensor(t.elem)
    return t


def trace_joint(fn: Callable, primals: list[torch.Tensor], kinds: list[str] | None = None, *, decompose: bool = False,
                functional: bool = True, mode: str = "fake", name: str = "joint") -> Traced:
    """The joint graph of `fn` at `primals` (those with requires_grad get gradients)."""
    wants_grad = [p.requires_grad for p in primals]
    layout: dict = {}

    def joint(primals, tangents):
        if functional:
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)):
                primals, tangents = [_to_fun(p) for p in primals], [_to_fun(t) for t in tangents]
        outs = _as_tuple(fn(*primals))
        diff = [o for o in outs if o.requires_grad]
        wrt = [p for p, w in zip(primals, wants_grad) if w]
        grads = torch.autograd.grad(diff, wrt, tangents, allow_unused=True)
        mutated = [k for k, p in enumerate(primals) if functional and torch._functionalize_has_data_mutation(p.elem)]
        wrt_index = [k for k, w in enumerate(wants_grad) if w]
        layout.update(n_user=len(outs), mutated=mutated, grads=[k for k, g in zip(wrt_index, grads) if g is not None])
        results = [*outs, *(primals[k] for k in mutated), *(g for g in grads if g is not None)]
        return [_from_fun(r) for r in results]

    tangents = _tangents(fn, primals)
    context = FunctionalTensorMode(_allow_token_discovery=True) if functional else contextlib.nullcontext()
    decomposition = torch._decomp.core_aten_decompositions() if decompose else None
    with enable_python_dispatcher(), context:
        gm = make_fx(joint, tracing_mode=mode, decomposition_table=decomposition)(primals, tangents)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return Traced(_stamp(ember_core.from_fx(gm, name=name), layout, kinds, len(primals)), primals, tangents)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _tangents(fn: Callable, primals: list[torch.Tensor]) -> list[torch.Tensor]:
    copies = [p.detach().clone().requires_grad_(p.requires_grad) for p in primals]
    with torch.random.fork_rng():
        outs = _as_tuple(fn(*copies))
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs if o.requires_grad]


def _stamp(graph: ember_core.Graph, layout: dict, kinds: list[str] | None, n_primals: int) -> JointGraph:
    kinds = kinds or ["user"] * n_primals
    mutated = set(layout["mutated"])
    inputs = [Input(i.name, kinds[k], k in mutated) if k < n_primals else Input(i.name, "tangent")
              for k, i in enumerate(graph.inputs)]
    outs = graph.outputs
    n_user, n_mut = layout["n_user"], len(layout["mutated"])
    outputs = [Output(o.name) for o in outs[:n_user]]
    outputs += [Output(o.name, "mutation", k) for o, k in zip(outs[n_user:n_user + n_mut], layout["mutated"])]
    outputs += [Output(o.name, "grad", k) for o, k in zip(outs[n_user + n_mut:], layout["grads"])]
    n_fwd = n_user + n_mut
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    forward = _ancestors(graph, producer, [o.name for o in outputs[:n_fwd]])
    nodes = [n.replace(meta={**n.meta, "region": "forward" if i in forward else "backward"})
             for i, n in enumerate(graph.nodes)]
    stamped = graph.replace(inputs=tuple(inputs), outputs=tuple(outputs), nodes=tuple(nodes))
    return JointGraph(ember_core.verify(stamped), n_primals, n_fwd)


def _ancestors(graph, producer, names) -> set[int]:
    seen, todo = set(), list(names)
    while todo:
        i = producer.get(todo.pop())
        if i is not None and i not in seen:
            seen.add(i)
            node = graph.nodes[i]
            todo += [a.name for a in _refs((node.args, tuple(node.kwargs.values())))]
    return seen


def _refs(arg):
    if isinstance(arg, ember_core.Ref):
        yield arg
    elif isinstance(arg, (list, tuple)):
        for a in arg:
            yield from _refs(a)


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
def zoo_block(name: str, decompose: bool = False, functional: bool = True) -> Traced:
    fn, primals, kinds = _zoo(name)
    return trace_joint(fn, primals, kinds, decompose=decompose, functional=functional, name=name)


# ---------------------------------------------------------------------------------------------- running


def run_joint(traced: Traced) -> list:
    torch.manual_seed(123)
    return ember_core.interpret(traced.joint.graph, traced.inputs)


def run_partition(traced: Traced, partition: ember_core.Partition) -> list:
    """Forward, then backward on the saved values and tangents: the joint's outputs, in the joint's order."""
    torch.manual_seed(123)
    fwd = ember_core.interpret(partition.forward, traced.primals)
    n = traced.joint.num_forward_outputs
    grads = ember_core.interpret(partition.backward, [*fwd[n:], *traced.tangents])
    return [*fwd[:n], *grads]


def check_partition(traced: Traced, partition: ember_core.Partition) -> None:
    """The partition computes what the joint computes, and both halves keep the `Partition` layout."""
    ember_core.verify(partition.forward)
    ember_core.verify(partition.backward)
    n = traced.joint.num_forward_outputs
    assert [o.kind for o in partition.forward.outputs[n:]] == ["saved"] * len(partition.saved)
    tangents = [i.name for i in traced.joint.graph.inputs[traced.joint.num_primals:]]
    assert [i.name for i in partition.backward.inputs] == [*partition.saved, *tangents]
    assert partition.backward.outputs == traced.joint.graph.outputs[n:]
    expected, got = run_joint(traced), run_partition(traced, partition)
    assert len(expected) == len(got)
    for k, (e, g) in enumerate(zip(expected, got)):
        torch.testing.assert_close(g, e, msg=lambda m, k=k: f"output {k} ({traced.joint.graph.outputs[k]}): {m}")


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
