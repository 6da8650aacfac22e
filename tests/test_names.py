"""Any name a module, class or function can have compiles, with each frontend: generated source spells it in ASCII
(Python would read `Ｂlock` as `Block`, and `x²` not at all)."""

from __future__ import annotations

import ember
import pytest
import torch
from conftest import FRONTENDS
from ember_core.testing import FallbackRecorder
from torch.testing import assert_close

NAMES = ["Ｂlock", "ｘ", "x²", "x¼", "日本", "a-b", "class"]


@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("name", NAMES)
def test_a_module_class_of_any_name_compiles(frontend, name):
    cls = type(name, (torch.nn.Module,), {"forward": lambda self, x: torch.relu(x) * 2 + 1})
    model, x = cls(), torch.randn(4, 8)
    with FallbackRecorder() as fallbacks:
        assert_close(ember.compile(model, options={"frontend": frontend})(x), model(x))
    fallbacks.check(name, ())


@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("name", NAMES)
def test_a_function_of_any_name_compiles(frontend, name):
    def f(x):
        return torch.sin(x) + 1

    f.__name__ = f.__qualname__ = name
    x = torch.randn(4, 8)
    with FallbackRecorder() as fallbacks:
        assert_close(ember.compile(f, options={"frontend": frontend})(x), f(x))
    fallbacks.check(name, ())
