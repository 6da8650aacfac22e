"""Fallback warnings: which causes warn, and where the warning points."""

from __future__ import annotations

import inspect
import warnings

import pytest
from ember_core import FALLBACK_CAUSES, WARNED_CAUSES, FallbackWarning, warn_fallback


def test_warned_causes_are_fallback_causes_and_the_routine_ones_are_left_out():
    assert set(WARNED_CAUSES) <= set(FALLBACK_CAUSES)
    assert {"eager", "build", "lowering", "print"} <= set(WARNED_CAUSES)
    assert not {"kernel", "cudagraphs", "autograd"} & set(WARNED_CAUSES)


def test_a_routine_cause_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_fallback("one kernel interpreted", "kernel", "model.py:3")


def test_the_warning_points_at_the_users_line_when_known():
    with pytest.warns(FallbackWarning, match="f runs eagerly") as told:
        warn_fallback("f runs eagerly", "eager", "/src/model.py:12")
    [w] = told
    assert (w.filename, w.lineno) == ("/src/model.py", 12)


def _library_code():
    warn_fallback("the build failed", "build", None)


def test_without_a_line_it_points_at_the_callers_caller():
    with pytest.warns(FallbackWarning) as told:
        line = inspect.currentframe().f_lineno + 1
        _library_code()
    [w] = told
    assert (w.filename, w.lineno) == (__file__, line)
