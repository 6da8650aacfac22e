"""Gathers whose indices are proven inside their input (bound-indices): `F.interpolate`'s compile to loads with no
bounds test and no negative-index wrap, and match eager forward and backward; an index the program gives, or one
computed to reach past the end, is still tested and fails as eager's does."""

from __future__ import annotations

import ember
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_value_and_grad

MODES = [("nearest", {}), ("nearest-exact", {}), ("bilinear", {"align_corners": False}),
         ("bilinear", {"align_corners": True}), ("bicubic", {"align_corners": False})]


def sources(rec) -> str:
    return "\n".join(e.source for e in rec.kinds("kernels_generated"))


@pytest.mark.parametrize("mode, kw", MODES, ids=[f"{m}-{kw.get('align_corners', '')}" for m, kw in MODES])
@pytest.mark.parametrize("scale", [0.5, 1.7])
def test_interpolation_gathers_load_without_a_test_and_match_eager(frontend, mode, kw, scale):
    def resize(x):
        return F.interpolate(x, scale_factor=scale, mode=mode, **kw).relu()

    compiled = ember.compile(resize, options={"frontend": frontend})
    with ember.record_events() as rec:
        assert_same_value_and_grad(resize, compiled, torch.randn(2, 3, 11, 16))
    assert not rec.kinds("fallback")
    forward = rec.kinds("kernels_generated")[0].source
    assert "ember_ok_" not in forward and "ember_err |=" not in forward, forward  # no test of any gather


def test_an_index_computed_past_the_end_still_raises_as_eager(frontend):
    """arange(n) * 3.3333333 truncated: 3 * 3.3333333 is 10.0 in float32, one past the end of 10 elements; the
    bound the exact product would give (9) must not be trusted."""
    def fn(x):
        return x[(torch.arange(4, dtype=torch.float32, device=x.device) * 3.3333333).long()] * 2

    x = torch.randn(10)
    with pytest.raises(IndexError):
        fn(x)
    compiled = ember.compile(fn, options={"frontend": frontend})
    with pytest.raises((IndexError, RuntimeError)):
        compiled(x)


def test_a_gather_of_program_indices_keeps_its_test(frontend):
    def fn(x, i):
        return x[i] * 2

    compiled = ember.compile(fn, options={"frontend": frontend})
    x = torch.randn(8)
    with ember.record_events() as rec:
        torch.testing.assert_close(compiled(x, torch.tensor([1, 7, 0])), fn(x, torch.tensor([1, 7, 0])))
    assert "ember_ok_" in sources(rec)
    with pytest.raises((IndexError, RuntimeError)):
        compiled(x, torch.tensor([1, 8, 0]))


def test_symbolic_sizes_match_eager():
    def resize(x):
        return F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False) * 2

    compiled = ember.compile(resize, dynamic=True)
    with ember.record_events() as rec:
        for size in ((12, 16), (7, 9), (30, 5)):
            assert_same_value_and_grad(resize, compiled, torch.randn(2, 3, *size), where=f"size={size}")
    assert not rec.kinds("fallback")
