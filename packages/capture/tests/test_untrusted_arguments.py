"""Argument values, dict keys and module names are user data: they never become part of generated guard code,
and a guard failure still explains itself in words."""

from __future__ import annotations

import builtins

import pytest
import torch
from ember_capture import TraceFrontend
from torch.testing import assert_close

CANARY = "EMBER_CANARY"
SET_CANARY = f"setattr(__import__('builtins'), '{CANARY}', 1)"  # no dots: module names may not hold one
NASTY = [
    "{" + SET_CANARY + "}",
    "{__import__(chr(111)+chr(115)).system(chr(105)+chr(100))}",
    "a { b } c", "}{", "'\"\n\\", "{0.__class__}", "\"); " + SET_CANARY + " #",
]


@pytest.fixture(autouse=True)
def no_canary():
    yield
    assert not hasattr(builtins, CANARY), "an argument's text was run as code"


def wrap(fn, compile_graph):
    return TraceFrontend().wrap(fn, compile_graph, {})


@pytest.mark.parametrize("text", NASTY)
def test_string_argument_text_never_runs_and_is_named_in_the_reason(compile_graph, events, text):
    compiled = wrap(lambda x, tag: x + len(tag), compile_graph)
    x = torch.ones(3)
    assert_close(compiled(x, text), x + len(text))
    assert_close(compiled(x, "other"), x + 5)
    assert compile_graph.count == 2
    assert events.of("recompiled")[0].message.endswith(f"tag: changed from {text!r} to 'other'")
    assert text not in compiled.entries[0].guard_source


@pytest.mark.parametrize("text", NASTY)
def test_dict_key_text_never_runs(compile_graph, events, text):
    compiled = wrap(lambda batch: batch[text] * 2, compile_graph)
    x = torch.ones(3)
    assert_close(compiled({text: x}), x * 2)
    assert_close(compiled({text: x.double()}), x.double() * 2)
    assert compile_graph.count == 2
    assert f"[{text!r}]: dtype changed from torch.float32 to torch.float64" in events.of("recompiled")[0].message
    for entry in compiled.entries:
        assert text not in entry.guard_source


@pytest.mark.parametrize("text", [NASTY[0], "{chr(1)}", "a'\nb"])
def test_module_name_text_never_runs(compile_graph, events, text):
    model = torch.nn.Module()
    model.add_module(text, torch.nn.Linear(3, 3))
    inner = getattr(model, text)
    compiled = wrap(lambda x: inner(x), compile_graph)
    compiled_model = wrap(model._modules[text], compile_graph)
    x = torch.randn(2, 3)
    assert_close(compiled(x), inner(x))
    assert_close(compiled_model(x), inner(x))
    model.train(False)
    inner.train(False)
    assert_close(compiled_model(x), inner(x))
    assert compile_graph.count == 3


def test_label_of_a_module_in_the_closure_with_braces_never_runs(compile_graph, events):
    outer = torch.nn.Sequential()
    outer.add_module("{" + SET_CANARY + "}", torch.nn.Linear(3, 3))
    compiled = wrap(lambda x: outer(x), compile_graph)
    x = torch.randn(2, 3)
    assert_close(compiled(x), outer(x))
    outer.train(False)
    assert_close(compiled(x), outer(x))
    assert compile_graph.count == 2
    assert "training changed from True to False" in events.of("recompiled")[0].message
