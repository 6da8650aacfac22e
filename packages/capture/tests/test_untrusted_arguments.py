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
    ran = hasattr(builtins, CANARY)
    if ran:  # so that one failure does not fail the tests after it
        delattr(builtins, CANARY)
    assert not ran, "an argument's text was run as code"


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


# ---------------------------------------------------------------------------------------------- hostile values
# Every value a guard reads from the user's program, of every type it can hold: a string that is code, an object
# every text form of which is code (and whose conversions to bool, int and index give code), int and float
# subclasses that print as code, tuples of them. Each is put where one kind of guard reads it; the function must
# still give eager's result (or run eagerly, visibly), and no text may ever run.

PAYLOAD = f"({SET_CANARY} or 1)"


class Hostile:
    """An object whose every text form, and every conversion to a number or a bool, is code."""

    def __repr__(self):
        return PAYLOAD

    __str__ = __repr__

    def __format__(self, spec):
        return PAYLOAD

    def __bool__(self):
        return PAYLOAD

    def __int__(self):
        return PAYLOAD

    def __index__(self):
        return PAYLOAD


class HostileInt(int):
    def __repr__(self):
        return PAYLOAD

    __str__ = __repr__

    def __format__(self, spec):
        return PAYLOAD


class HostileFloat(float):
    def __repr__(self):
        return PAYLOAD

    __str__ = __repr__

    def __format__(self, spec):
        return PAYLOAD


HOSTILE = {
    "code_string": "True and " + SET_CANARY,
    "object": Hostile(),
    "int_subclass": HostileInt(2),
    "float_subclass": HostileFloat(0.5),
    "tuple": (HostileInt(1), Hostile(), "x) or " + SET_CANARY + " or (1"),
}


def _model_with_training(value):
    model = torch.nn.Linear(3, 3)
    model.training = value  # any object: it is the user's to assign
    return model, model


class _ParameterOverriding(torch.nn.Parameter):
    """A parameter whose Python-level metadata (`shape`, or `requires_grad`) is whatever the test says; its
    kernels see the real tensor."""

    hostile: dict = {}

    def __getattribute__(self, name):
        hostile = torch.Tensor.__getattribute__(self, "hostile")
        return hostile[name] if name in hostile else torch.Tensor.__getattribute__(self, name)


def _model_with_parameter(attribute):
    def make(value):
        model = torch.nn.Linear(3, 3)
        weight = _ParameterOverriding(model.weight.detach().clone())
        weight.hostile = {attribute: value}
        model.weight = weight
        return model, model

    return make


class _TensorOverriding(torch.Tensor):
    """A tensor whose Python-level `dim()` or `requires_grad` says what the test says."""

    hostile: dict = {}

    def __getattribute__(self, name):
        hostile = torch.Tensor.__getattribute__(self, "hostile")
        if name == "dim" and "dim" in hostile:
            return lambda: hostile["dim"]
        return hostile[name] if name in hostile else torch.Tensor.__getattribute__(self, name)


def _function_reading_a_tensor_with(attribute):
    def make(value):
        table = torch.ones(3).as_subclass(_TensorOverriding)
        table.hostile = {attribute: value}
        return (lambda x: x + table), None

    return make


def _function_reading_a_value(value):
    setting = value
    return (lambda x: x * 2 if setting is not None else x), None


def _function_reading_a_dict_by_hostile_key(value):
    key = value if not isinstance(value, float) else HostileInt(7)  # a float key is a fine key too, but not 0.5
    table = {key: 3.0, "other": value}
    return (lambda x: x * table[key]), None


def _function_reading_containers_of(value):
    items, members = [value, 1], frozenset({value, 2})  # guarded by length (its items by value), by equality
    return (lambda x: x * len(items) + len(members)), None


def _module_with_a_public_attribute(value):
    model = torch.nn.Linear(3, 3)
    model.tag = value  # a torch module's public attributes are guarded by value
    return model, model


def _function_taking_a_hostile_argument(value):
    return (lambda x, v: x * 2), value


def _function_taking_a_dict_with_a_hostile_key(value):
    key = value if not isinstance(value, tuple) else HostileInt(3)
    return (lambda batch: batch[key] * 2), key


GUARD_KINDS = {
    "module_training": _model_with_training,
    "parameter_shape": _model_with_parameter("shape"),
    "parameter_requires_grad": _model_with_parameter("requires_grad"),
    "read_tensor_dim": _function_reading_a_tensor_with("dim"),
    "read_tensor_requires_grad": _function_reading_a_tensor_with("requires_grad"),
    "read_value": _function_reading_a_value,
    "read_dict_key": _function_reading_a_dict_by_hostile_key,
    "read_list_and_set": _function_reading_containers_of,
    "torch_module_attribute": _module_with_a_public_attribute,
    "argument_value": _function_taking_a_hostile_argument,
    "argument_dict_key": _function_taking_a_dict_with_a_hostile_key,
}


def _call(fn, kind, extra, x):
    if kind == "argument_value":
        return fn(x, extra)
    if kind == "argument_dict_key":
        return fn({extra: x})
    return fn(x)


@pytest.mark.parametrize("value", sorted(HOSTILE))
@pytest.mark.parametrize("kind", sorted(GUARD_KINDS))
def test_hostile_values_never_become_guard_code(compile_graph, events, kind, value):
    fn, extra = GUARD_KINDS[kind](HOSTILE[value])
    compiled = wrap(fn, compile_graph)
    x = torch.randn(2, 3)
    for _ in range(3):  # the first call traces; the others run the guard (and its explanation on a miss)
        got = _call(compiled, kind, extra, x)
        assert not hasattr(builtins, CANARY), "a hostile value was run as guard code"
        assert_close(got.as_subclass(torch.Tensor), _call(fn, kind, extra, x).as_subclass(torch.Tensor))
    for entry in compiled.entries:
        assert SET_CANARY not in entry.guard_source
    if compiled.fallback_reason is not None:  # running eagerly is allowed, but never silently
        assert events.of("fallback")
