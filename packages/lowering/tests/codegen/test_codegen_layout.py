"""PlanLayout: roots and offsets of views and reused storage, and where each symbol is bound."""

from __future__ import annotations

import pytest
import torch
from ember_lowering import lower
from ember_lowering.codegen import CannotPrint, PlanLayout
from lowering_checks import trace


def test_views_are_addressed_from_their_root_with_an_offset():
    plan = lower(trace(lambda x: (x[1:3], x.select(1, 2)), torch.randn(4, 5)), emit_event=False)
    layout = PlanLayout(plan)
    views = [b.name for b in plan.buffers if b.kind == "view"]
    assert [layout.root(v) for v in views] == ["arg0_1", "arg0_1"]
    assert sorted(int(layout.rel_offset(v)) for v in views) == [2, 5]


def test_symbols_are_bound_from_input_shapes():
    plan = lower(trace(lambda x: (x.sum(1),), torch.randn(4, 6), mode="symbolic"), emit_event=False)
    layout = PlanLayout(plan)
    assert [expr for _, expr in layout.bindings()] == ["b_arg0_1.shape[0]", "b_arg0_1.shape[1]"]


def test_a_symbol_bound_nowhere_cannot_print():
    plan = lower(trace(lambda x: (x.sum(1),), torch.randn(4, 6), mode="symbolic"), emit_event=False)
    x = plan.buffers[0]
    import sympy

    s = sympy.Symbol(str(x.shape[0]), integer=True)
    odd = plan.replace(buffers=(x.replace(shape=(2 * s, x.shape[1])), *plan.buffers[1:]))
    with pytest.raises(CannotPrint, match="appear in no input"):
        PlanLayout(odd).bindings()
