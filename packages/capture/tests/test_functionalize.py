"""Functionalization facts: aliases, mutations and eager autograd's view of outputs."""

from __future__ import annotations

import torch
from ember_capture._functionalize import TraceFacts, functionalized
from torch._subclasses.fake_tensor import FakeTensorMode


def run_facts(fn, *tensors):
    facts = TraceFacts()
    mode = FakeTensorMode()
    with mode:
        fakes = [mode.from_tensor(t) for t in tensors]
        outs = functionalized(fn, facts)(*fakes)
    return facts, outs


def test_records_aliases_mutations_and_requires_grad():
    def f(x, y):
        y.add_(1)
        return x.view(-1), x * 2, y

    facts, outs = run_facts(f, torch.randn(2, 2, requires_grad=True), torch.zeros(2))
    assert facts.aliases == [0, None, 1]
    assert facts.out_requires_grad == [True, True, False]
    assert facts.mutated == [1] and facts.mutated_requires_grad == [False]
    assert len(outs) == 4 and not any(type(o).__name__ == "FunctionalTensor" for o in outs)
