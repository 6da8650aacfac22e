"""Capabilities: a codegen says what its kernels do, and the loop-IR pipeline picks its passes from that."""

from __future__ import annotations

import pytest
from ember_lowering import Capabilities, SplitPolicy, default_passes, select_passes


class Widen:
    id = "widen"
    reasons = frozenset()

    def run(self, plan, note):
        return plan


def ids(passes) -> list[str]:
    return [p.id for p in passes]


def test_the_default_capabilities_run_every_default_pass():
    assert ids(select_passes(default_passes(), Capabilities())) == ids(default_passes())


def test_passes_that_need_a_capability_go_without_it():
    chosen = ids(select_passes(default_passes(), Capabilities(stashes=False, row_moments=True)))
    assert "stash-values" not in chosen and "split-moments" not in chosen
    assert chosen == [i for i in ids(default_passes()) if i not in ("stash-values", "split-moments")]


def test_a_codegen_adds_its_own_pass_after_a_named_one():
    chosen = ids(select_passes(default_passes(), Capabilities(passes=(("coalesce-dims", Widen()),))))
    assert chosen[chosen.index("coalesce-dims") + 1] == "widen"
    with pytest.raises(ValueError, match=r"after \['no-such-pass'\], which are not default passes"):
        select_passes(default_passes(), Capabilities(passes=(("no-such-pass", Widen()),)))


def test_every_capability_that_changes_a_plan_is_in_its_cache_fact():
    facts = {Capabilities().fact(), Capabilities(stashes=False).fact(), Capabilities(row_moments=True).fact(),
             Capabilities(split_reductions=SplitPolicy()).fact(),
             Capabilities(passes=(("coalesce-dims", Widen()),)).fact()}
    assert len(facts) == 5
