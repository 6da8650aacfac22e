"""The stash: a later loop reads an expensive value an earlier loop computed, instead of recomputing it."""

from __future__ import annotations

import torch
from ember_codegen_cpp._stash import plan_stash
from ember_lowering import lower
from helpers import check, trace


def _kernel(fn, *args, mode="fake"):
    return lower(trace(fn, *args, mode=mode), emit_event=False).kernels[0]


def test_softmax_stashes_its_exp():
    stash = plan_stash(_kernel(lambda x: (torch.softmax(x, -1),), torch.randn(4, 64)))
    assert len(stash.store) == 1 and len(stash.load) == 1 and stash.elements == 64


def test_no_stash_for_symbolic_or_long_rows_or_cheap_values():
    assert not plan_stash(_kernel(lambda x: (torch.softmax(x, -1),), torch.randn(4, 64), mode="symbolic"))
    assert not plan_stash(_kernel(lambda x: (torch.softmax(x, -1),), torch.randn(2, 100_000)))
    assert not plan_stash(_kernel(lambda x: (torch.nn.functional.layer_norm(x, (64,)),), torch.randn(4, 64)))


def test_stashed_softmax_and_log_softmax_match_eager():
    x = torch.randn(37, 300)
    check(lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1), torch.softmax(x * 3, 0)), x)
