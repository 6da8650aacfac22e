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
