"""`without_saved_tensor_hooks`: what a trace saves for its own autograd never reaches the user's saved-tensor hooks
(a non-reentrant checkpoint's recomputation hook stopped ember's trace midway); outside, they apply again."""

from __future__ import annotations

import torch
from ember_core import without_saved_tensor_hooks


def test_a_trace_saves_tensors_past_the_users_hooks_and_they_apply_again_after():
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    x = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with without_saved_tensor_hooks():
            inside = (x * x).sum()
        assert packed == []
        outside = (x * x).sum()
        assert packed == [(3,), (3,)]
    (inside + outside).backward()  # what was saved inside is still saved, and unpacks
    torch.testing.assert_close(x.grad, 4 * x.detach())


def test_nested_blocks_restore_the_flag_they_found():
    packed = []
    x = torch.randn(2, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        with without_saved_tensor_hooks():
            with without_saved_tensor_hooks():
                x.exp()
            x.exp()
        assert packed == []
        x.exp()
    assert packed == [1]
