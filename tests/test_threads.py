"""Four threads compiling and running models at once, with each frontend: results equal eager's (forward and
backward), and `print` / `Tensor.register_hook` are untouched afterwards."""

from __future__ import annotations

import builtins
import copy

import ember
import pytest
import torch
from conftest import FRONTENDS
from ember_core.testing import in_threads
from torch.testing import assert_close

ROUNDS = 3
PRINT, REGISTER_HOOK = builtins.print, torch.Tensor.register_hook


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def train_step_matches_eager(frontend: str, k: int) -> None:
    model = mlp()  # the RNG is shared by the threads: the reference is a copy, not a second draw
    ref = copy.deepcopy(model)
    compiled = ember.compile(model, options={"frontend": frontend})
    x = torch.randn(5 + k, 8)
    out, expected = compiled(x), ref(x)
    assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad)


def closure_function_matches_eager(frontend: str, k: int) -> None:
    weight = torch.randn(8, 8)

    def f(x):
        return torch.softmax(x @ weight, dim=-1) * (k + 1)

    compiled = ember.compile(f, options={"frontend": frontend})
    for n in (3, 4):
        x = torch.randn(n, 8)
        assert_close(compiled(x), f(x))


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_four_threads_compile_and_train_at_once(frontend):
    for _ in range(ROUNDS):
        in_threads(lambda k: train_step_matches_eager(frontend, k))
        in_threads(lambda k: closure_function_matches_eager(frontend, k))
    assert builtins.print is PRINT and torch.Tensor.register_hook is REGISTER_HOOK


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_threads_share_one_compiled_model(frontend):
    model = mlp()
    ref = copy.deepcopy(model)
    compiled = ember.compile(model, options={"frontend": frontend})
    x = torch.randn(6, 8)
    with torch.no_grad():
        expected = ref(x)
        in_threads(lambda k: [assert_close(compiled(x), expected) for _ in range(10)])
    assert builtins.print is PRINT and torch.Tensor.register_hook is REGISTER_HOOK
