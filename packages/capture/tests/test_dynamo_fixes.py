"""The dynamo frontend's fixes to torch._dynamo (`_dynamo_fixes.py`), checked against a reader with the fault that
torch 2.11's Dynamo has (pytorch#176851), so that they are tested on every torch. (Enum members, which 2.11 builds
as a sourceless `EnumVariable`, are checked on 2.11 itself: tests/test_guards.py in the lowest-torch session.)"""

from __future__ import annotations

import pytest
import torch
from ember_capture import _dynamo_fixes, prepare_dynamo
from ember_core import wrapped_by
from torch._dynamo.variables import ConstantVariable
from torch._dynamo.variables.user_defined import UserDefinedClassVariable


class Settings:
    LOW = -1.0
    STEPS = 2
    NAME = "a"


def uses_settings(x):
    y = x.clamp(min=Settings.LOW)
    for _ in range(Settings.STEPS):
        y = y + 1
    return y * 2 if Settings.NAME == "a" else y


@pytest.fixture
def forgetful_dynamo(monkeypatch):
    """Dynamo's reader of class attributes made to forget the source of constants, as torch 2.11's does."""
    read = vars(UserDefinedClassVariable)["var_getattr"]
    while "class-constants-guarded" in wrapped_by(read):
        read = read.__wrapped__

    def forgetful(self, tx, name):
        if self.value is Settings and name in ("LOW", "STEPS", "NAME"):
            return ConstantVariable.create(vars(Settings)[name])  # as 2.11 builds it: no source, so no guard
        return read(self, tx, name)

    monkeypatch.setattr(UserDefinedClassVariable, "var_getattr", forgetful)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def settings(monkeypatch):
    for name, value in vars(Settings).copy().items():
        if not name.startswith("_"):
            monkeypatch.setattr(Settings, name, value)  # put back after the test
    return Settings


def changes_seen(settings) -> list[bool]:
    compiled = torch.compile(uses_settings, backend="eager")
    x = torch.linspace(-3, 3, 7)
    seen = [torch.equal(compiled(x), uses_settings(x))]
    for name, value in [("LOW", 0.5), ("STEPS", 3), ("NAME", "b")]:
        setattr(settings, name, value)
        seen.append(torch.equal(compiled(x), uses_settings(x)))
    return seen


def test_the_forgetful_reader_computes_with_stale_constants(forgetful_dynamo, settings):
    """The fault the fix is for: Dynamo compiles once and keeps the first values, without an error."""
    assert changes_seen(settings) == [True, False, False, False]


def test_prepared_dynamo_guards_class_constants_and_recompiles(forgetful_dynamo, settings):
    prepare_dynamo()
    prepare_dynamo()  # again: nothing is wrapped twice
    reader = vars(UserDefinedClassVariable)["var_getattr"]
    assert "class-constants-guarded" in wrapped_by(reader)
    assert "class-constants-guarded" not in wrapped_by(reader.__wrapped__)
    assert changes_seen(settings) == [True, True, True, True]


def test_a_name_dynamo_answers_itself_is_left_as_built():
    assert _dynamo_fixes._class_constant(Settings, "__name__") is _dynamo_fixes._MISSING
    assert _dynamo_fixes._class_constant(Settings, "missing") is _dynamo_fixes._MISSING
    assert _dynamo_fixes._class_constant(Settings, "uses") is _dynamo_fixes._MISSING
    assert _dynamo_fixes._class_constant(Settings, "LOW") == -1.0
