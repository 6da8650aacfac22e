"""Compiled autograd (`ember.compiled_autograd`): the whole backward captured at run time, hooks included, compiled
by ember, equal to eager. Each test compares parameters' gradients (and, where it trains, the parameters) with an
eager twin, and counts the backward captures from `backward_captured` events."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
import textwrap

import ember
import ember_autograd._wrapper
import ember_runtime
import pytest
import torch
from torch import nn


@pytest.fixture(autouse=True)
def fresh_engine_cache():
    """The engine's cache of captured backwards is process-wide: each test starts without one, and compiles what
    it counts (no compiled graph reused from another test)."""
    ember.compiled_autograd.reset()
    ember_runtime.clear_cache()
    yield
    ember.compiled_autograd.reset()


def captures(rec) -> list:
    return rec.kinds("backward_captured")


def backward_graphs(rec) -> list[str]:
    return [e.graph.name for e in rec.kinds("graph_compiled") if e.graph.name.startswith("backward_")]


def assert_same_grads(model, twin):
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad is not None, f"{name} has no gradient"
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"grad of {name}: {m}")


def assert_no_fallback(rec):
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


class Model(nn.Module):  # the seed document's model
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 10)

    def forward(self, x):
        return self.linear(x)


@pytest.mark.parametrize("frontend", ["dynamo", "trace"])
def test_the_seed_model_backward_is_captured_and_compiled(frontend):
    torch.manual_seed(0)
    model, x = Model(), torch.randn(10)
    twin = copy.deepcopy(model)
    compiled = ember.compile(model, options={"frontend": frontend})
    with ember.record_events() as rec, ember.compiled_autograd.enable():
        compiled(x).sum().backward()
    twin(x).sum().backward()
    assert_same_grads(model, twin)
    assert len(captures(rec)) == 1 and len(backward_graphs(rec)) == 1
    assert_no_fallback(rec)
    # the captured backward is the forward's backward graph plus the accumulation into .grad, compiled natively
    backward = next(e for e in rec.kinds("graph_compiled") if e.graph.name.startswith("backward_"))
    assert backward.payload.compiled.codegen == "cpp"
    assert any(n.op == "aten.mm.default" for n in backward.graph.nodes)


@pytest.mark.parametrize("frontend", ["dynamo", "trace"])
def test_a_training_step_compiled_whole_trains_equal_to_eager(frontend):
    """Forward, backward and the optimizer under one `ember.compile` with `compiled_autograd`: Dynamo breaks the
    graph at `loss.backward()`, and the backward runs captured; 20 steps track eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    twin = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-2)

    def step(model, opt, x, y):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    compiled = ember.compile(step, options={"compiled_autograd": True, "frontend": frontend})
    with ember.record_events() as rec:
        for _ in range(20):
            x, y = torch.randn(16, 8), torch.randn(16, 4)
            torch.testing.assert_close(compiled(model, opt, x, y), step(twin, twin_opt, x, y))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)
    assert 1 <= len(captures(rec)) <= 2  # .grad is None after zero_grad: one graph serves every step
    if frontend == "dynamo":
        assert_no_fallback(rec)
    else:  # ember's own JIT cannot trace the step's backward: the step runs eagerly, its backward still captured
        assert [e.get("cause") for e in rec.kinds("fallback")] == ["eager"]


# ---------------------------------------------------------------------------------------------- hooks


class HookedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 12), nn.Linear(12, 3)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * 3.0)  # a tensor hook on an activation
        return self.fc2(h)


def add_hooks(model, log):
    def scale_input_grad(module, grad_input, grad_output):
        log.append("module")
        return (grad_input[0] * 0.5,)

    def double_accumulated(param):
        log.append("post")
        param.grad.mul_(2.0)

    model.fc2.register_full_backward_hook(scale_input_grad)
    model.fc1.weight.register_hook(lambda g: g.clamp(-0.1, 0.1))
    model.fc1.bias.register_post_accumulate_grad_hook(double_accumulated)


def test_backward_hooks_are_captured_and_run():
    """A tensor hook on an activation, a hook on a parameter, a module full-backward hook and a post-accumulate
    hook: each changes the gradients, so a skipped or doubled hook shows."""
    torch.manual_seed(0)
    model = HookedMLP()
    twin = copy.deepcopy(model)
    log, twin_log = [], []
    add_hooks(model, log)
    add_hooks(twin, twin_log)
    compiled = ember.compile(model)
    with ember.record_events() as rec, ember.compiled_autograd.enable():
        for _ in range(3):
            x = torch.randn(5, 6)
            model.zero_grad()
            twin.zero_grad()
            compiled(x).pow(2).sum().backward()
            twin(x).pow(2).sum().backward()
            assert_same_grads(model, twin)
    assert log == twin_log
    assert len(captures(rec)) == 1
    # the forward registers a hook on an activation and module hooks: Dynamo hands such a graph a BackwardState,
    # which ember cannot capture; that forward runs eagerly, visibly, and the backward is still captured whole
    reasons = {e.get("reason") for e in rec.kinds("fallback")}
    assert len(reasons) == 1 and "BackwardState" in reasons.pop()


def test_hooks_on_parameters_keep_the_forward_compiled():
    """Hooks on parameters (a tensor hook and a post-accumulate hook) need no BackwardState: forward and backward
    are both compiled, and the hooks run inside the captured backward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    twin = copy.deepcopy(model)
    log, twin_log = [], []
    for m, lg in ((model, log), (twin, twin_log)):
        m[0].weight.register_hook(lambda g: g * 0.25)
        m[2].bias.register_post_accumulate_grad_hook(lambda p, lg=lg: lg.append(float(p.grad.sum())))
    compiled = ember.compile(model)
    with ember.record_events() as rec:
        for _ in range(2):
            x = torch.randn(5, 6)
            with ember.compiled_autograd.enable():
                compiled(x).pow(2).sum().backward()
            twin(x).pow(2).sum().backward()
            assert_same_grads(model, twin)
    # the hook logged float32 sums as Python floats: compared at float32's tolerances (they differ in the last bits
    # with the order of the additions, which depends on the CPU)
    torch.testing.assert_close(torch.tensor(log, dtype=torch.float32), torch.tensor(twin_log, dtype=torch.float32))
    assert_no_fallback(rec)


# ---------------------------------------------------------------------------------------------- graph breaks


class BrokenModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h * 2)


def test_a_graph_break_in_the_forward_does_not_split_the_backward():
    torch.manual_seed(0)
    model = BrokenModel()
    twin = copy.deepcopy(model)
    compiled = ember.compile(model)
    x = torch.randn(4, 8)
    with ember.record_events() as rec, ember.compiled_autograd.enable():
        compiled(x).sum().backward()
    twin(x).sum().backward()
    assert_same_grads(model, twin)
    forwards = [e for e in rec.kinds("graph_compiled") if e.graph.name.endswith("_joint_forward")]
    assert len(forwards) == 2  # two forward graphs (the break) ...
    assert len(backward_graphs(rec)) == 1  # ... one backward, holding both of their backward graphs
    backward = next(e.graph for e in rec.kinds("graph_compiled") if e.graph.name.startswith("backward_"))
    assert sum(n.op == "aten.mm.default" for n in backward.nodes) >= 3  # both Linear layers' gradients


# ---------------------------------------------------------------------------------------------- recaptures


def test_a_backward_whose_graph_changes_is_captured_again_with_the_reason():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    twin = copy.deepcopy(model)
    compiled = ember.compile(model, dynamic=True)

    def run(x, frozen=False):
        model[0].weight.requires_grad_(not frozen)
        twin[0].weight.requires_grad_(not frozen)
        with ember.compiled_autograd.enable():
            compiled(x).sum().backward()
        twin(x).sum().backward()  # eager, outside: its backward is not captured
        if not frozen:
            assert_same_grads(model, twin)

    with ember.record_events() as rec:
        run(torch.randn(3, 4))  # first capture: .grad absent
        run(torch.randn(3, 4))  # .grad now exists: accumulation is another graph
        run(torch.randn(7, 4))  # new batch sizes: the captured backward's sizes are symbolic, it is reused
        run(torch.randn(9, 4))
        run(torch.randn(9, 4), frozen=True)  # one weight stops requiring grad: another autograd graph
    reasons = [e.get("reasons") for e in captures(rec)]
    assert len(reasons) == 3, "\n".join(map(str, reasons))
    assert "new autograd node" in reasons[0][0] and "GraphRoot" in reasons[0][0]
    assert "new autograd node" in reasons[1][0] and "AccumulateGrad" in reasons[1][0]
    assert "CompiledFunctionBackward" in reasons[2][0]  # the forward graph compiled again: a new autograd node
    assert_no_fallback(rec)


def test_logs_name_the_recapture_reason():
    script = textwrap.dedent("""
        import torch, ember
        model = torch.nn.Linear(4, 2)
        compiled = ember.compile(model)
        with ember.compiled_autograd.enable():
            for _ in range(2):
                compiled(torch.randn(3, 4)).sum().backward()
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "EMBER_LOGS": "compiled_autograd"})
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("[ember.compiled_autograd]")]
    assert len(lines) == 2, run.stderr[-2000:]
    assert "GraphRoot" in lines[0] and "AccumulateGrad" in lines[1]


def test_without_compiled_autograd_nothing_is_captured():
    model = Model()
    compiled = ember.compile(model)
    with ember.record_events() as rec:
        compiled(torch.randn(10)).sum().backward()
    assert not captures(rec) and not backward_graphs(rec)
    assert not ember.compiled_autograd.is_enabled()


def test_a_captured_backward_of_a_bfloat16_norm_of_equal_rows_keeps_eagers_zero_gradient():
    """The captured backward is one graph of plain inputs (the forward's saved values among them) that computes
    again what the forward computed: lowering must round its bfloat16 values as the forward's kernels did. Left
    unrounded there (keep-float32 took it for a graph that trains nothing), `v` less the mean the forward saved
    rounded was 2^-9 where eager has an exact 0, and 1/sqrt(eps) made the weight's gradient of order 1."""
    torch.manual_seed(0)
    x = torch.randn(1, 17).to(torch.bfloat16).expand(5, 17)
    w, b = (torch.randn(17).to(torch.bfloat16) for _ in range(2))

    def norm(x, w, b):
        v = x / (x.abs() + 1)
        mu = v.mean(0)
        return (v - mu) * torch.rsqrt(((v - mu) ** 2).mean(0) + 1e-5) * w + b

    grads = []
    for fn, capture in ((norm, False), (ember.compile(norm), True)):
        leaves = [t.detach().requires_grad_() for t in (x, w, b)]
        with ember.record_events() as rec, (ember.compiled_autograd.enable() if capture else contextlib.nullcontext()):
            fn(*leaves).pow(2).sum().backward()
        grads.append([t.grad for t in leaves])
        if capture:
            assert captures(rec) and backward_graphs(rec)
            assert_no_fallback(rec)
            planned = [e for e in rec.kinds("kernels_planned") if e.get("graph").startswith("backward_")]
            decisions = [d for e in planned for d in e.get("decisions") if d.pass_id == "keep-float32"]
            assert [(d.verdict, d.reason) for d in decisions] == [("kept", "training-graph")]
    assert torch.equal(grads[0][1], torch.zeros(17, dtype=torch.bfloat16))
    assert torch.equal(grads[1][1], grads[0][1])
    torch.testing.assert_close(grads[1][2], grads[0][2])


@pytest.mark.parametrize("frontend", ["dynamo", "trace"])
def test_a_backward_holding_an_aten_kernel_without_a_symbolic_form_is_captured(frontend):
    """softshrink's backward stays ATen's kernel in a static joint trace (eager's very bits), and compiled autograd
    traces the captured backward with symbolic sizes, where that TensorIterator kernel cannot run on fake tensors:
    Dynamo raised out of `backward()` (torch.compile's own path decomposes it). The backward module the capture
    traces computes such kernels by their formulas, as a symbolic joint trace does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Softshrink(0.25), nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    compiled = ember.compile(model, options={"frontend": frontend})
    x = torch.randn(4, 8)
    with ember.record_events() as rec, ember.compiled_autograd.enable():
        compiled(x).pow(2).sum().backward()
    twin(x).pow(2).sum().backward()
    assert_same_grads(model, twin)
    assert captures(rec)
    assert_no_fallback(rec)


NORMS = {"none": nn.Identity, "layer": lambda: nn.LayerNorm(16), "batch": lambda: nn.BatchNorm1d(16),
         "group": lambda: nn.GroupNorm(4, 16)}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("critic_compiled", [True, False], ids=["compiled critic", "eager critic"])
def test_a_gradient_penalty_under_compiled_autograd_gives_eagers_gradients(critic_compiled, norm, monkeypatch):
    """`torch.autograd.grad(create_graph=True)` is captured too. Dynamo traced ember's node's backward into it as
    the backward graph on the saved values: those carry no history, so the penalty's gradient lost its path
    through them and the first layer's weight came out 0.14 off eager's, silently (its bias got None). The node's
    backward now runs differentiably there, as outside compiled autograd. The penalty's own backward, captured
    next, goes through the graphs the first capture compiled: their backward modules are made when their forward
    runs, not by Dynamo tracing the capture (which traced the module's builder)."""
    built_in_dynamo = []
    make = ember_autograd._wrapper._with_formulas
    monkeypatch.setattr(ember_autograd._wrapper, "_with_formulas",
                        lambda gm: built_in_dynamo.append(torch.compiler.is_compiling()) or make(gm))
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(4, 16), NORMS[norm](), nn.Tanh(), nn.Linear(16, 1))
    twin = copy.deepcopy(critic)
    data = torch.randn(8, 4)
    grads = []
    for fn, capture in ((twin, False), (ember.compile(critic) if critic_compiled else critic, True)):
        x = data.clone().requires_grad_()
        with ember.record_events() as rec, (ember.compiled_autograd.enable() if capture else contextlib.nullcontext()):
            out = fn(x)
            grad, = torch.autograd.grad(out.sum(), x, create_graph=True)
            (out.mean() + 10 * (grad.norm(2, dim=1) - 1).pow(2).mean()).backward()
        grads.append(grad)
    torch.testing.assert_close(grads[1], grads[0])
    assert_same_grads(critic, twin)
    assert len(captures(rec)) == 2
    assert built_in_dynamo and not any(built_in_dynamo)
