"""Compiled optimizers, as `torch.compile(optimizer.step)` is used: SGD, Adam and AdamW, foreach and single-tensor.
Parameters and state are updated in place and equal eager's after 20 steps; each step runs as a few fused kernels
(no ATen calls: the foreach ops are decomposed per tensor, and fuse)."""

from __future__ import annotations

import copy

import ember
import pytest
import torch

OPTIMIZERS = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3, foreach=foreach),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=1e-2, foreach=foreach),
    "adamw": lambda params, foreach: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=foreach),
}
OPTIMIZERS_LR = {"sgd": 0.05, "adam": 1e-2, "adamw": 1e-2}


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_twenty_compiled_steps_match_eager(name, foreach):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    opt, eager_opt = OPTIMIZERS[name](model.parameters(), foreach), OPTIMIZERS[name](twin.parameters(), foreach)
    step = ember.compile(opt.step)
    with ember.record_events() as rec:
        for _ in range(20):
            x = torch.randn(4, 8)
            for m, o, s in ((model, opt, step), (twin, eager_opt, eager_opt.step)):
                o.zero_grad()
                m(x).pow(2).mean().backward()
                s()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)
        for key, value in eager_opt.state[q].items():
            torch.testing.assert_close(opt.state[p][key], value, msg=lambda m, key=key: f"state {key}: {m}")
    generated = rec.kinds("kernels_generated")
    assert generated and not rec.kinds("fallback") and not rec.kinds("graph_break")
    assert all(" 0 extern calls" in e.message for e in generated), [e.message for e in generated]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_steps_under_a_learning_rate_scheduler_match_eager_and_stay_fused(name):
    """A scheduler changes the learning rate, a Python float, every step: Dynamo compiles the step again with it as
    a 0-d tensor input read back with `.item()`, and the step computes `-lr`, `lr * weight_decay` in Python
    arithmetic on it. Those were symbols no kernel could bind, and SGD's and AdamW's steps ran in the interpreter
    codegen (a `lowering` fallback). Now each is a 0-d kernel: every step after the first scheduled one is one
    graph of fused kernels, and parameters and state equal eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    opt, eager_opt = OPTIMIZERS[name](model.parameters(), True), OPTIMIZERS[name](twin.parameters(), True)
    schedules = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.8) for o in (opt, eager_opt)]
    step = ember.compile(opt.step, options={"cache": False})  # every graph planned and generated here
    with ember.record_events() as rec:
        for _ in range(8):
            x = torch.randn(4, 8)
            for m, o, s, schedule in ((model, opt, step, schedules[0]), (twin, eager_opt, eager_opt.step,
                                                                         schedules[1])):
                o.zero_grad()
                m(x).pow(2).mean().backward()
                s()
                schedule.step()
    assert opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"] < OPTIMIZERS_LR[name] * 0.8 ** 7
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)
        for key, value in eager_opt.state[q].items():
            torch.testing.assert_close(opt.state[p][key], value, msg=lambda m, key=key: f"state {key}: {m}")
    generated = rec.kinds("kernels_generated")
    assert len(generated) == 2 and not rec.kinds("fallback") and not rec.kinds("graph_break")
    assert all(" 0 extern calls" in e.message for e in generated), [e.message for e in generated]
