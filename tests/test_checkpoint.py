"""Activation checkpointing (`torch.utils.checkpoint`) in compiled training: the same numbers as eager, and the memory
it is used for. Before, ember's partitioner ignored the marks Dynamo gives a checkpointed region's nodes: a stack of
four checkpointed blocks kept 5x the activations eager keeps (everything, as without checkpointing), and its
backward recomputed nothing. Both frontends mark a checkpointed region's nodes (the trace frontend in
`ember_capture._checkpoints`)."""

from __future__ import annotations

import copy

import ember
import ember_core
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_training_step
from ember_core.testing import kept_for_backward
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts


class Block(nn.Module):
    def __init__(self, d: int = 32, p: float = 0.0):
        super().__init__()
        self.ln, self.up, self.down, self.p = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d), p

    def forward(self, x):
        return x + F.dropout(self.down(F.gelu(self.up(self.ln(x)))), self.p, self.training)


class Stack(nn.Module):
    """Blocks one after another, each run through `checkpoint` (`how`: None runs them plainly)."""

    def __init__(self, blocks: int = 4, how: str | None = "plain", p: float = 0.0, d: int = 32):
        super().__init__()
        self.blocks, self.how = nn.ModuleList(Block(d, p) for _ in range(blocks)), how

    def forward(self, x):
        for block in self.blocks:
            if self.how is None:
                x = block(x)
            elif self.how == "selective":  # keep the matmuls, recompute the rest
                x = checkpoint(block, x, use_reentrant=False, context_fn=keep_matmuls)
            else:
                x = checkpoint(block, x, use_reentrant=self.how == "reentrant")
        return x


def keep_matmuls():
    from torch.utils.checkpoint import CheckpointPolicy

    matmuls = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in matmuls else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def activation_bytes(fn, x, params) -> int:
    """Bytes autograd keeps between the forward and the backward, the input and the parameters left out."""
    return kept_for_backward(lambda: fn(x).sum(), [x, *params])


def partition_notes(compiled, x) -> list[str]:
    """The partition reports' notes of a first training step."""
    with ember_core.record_events() as rec:
        compiled(x).sum().backward()
    return [n for e in rec.kinds("partitioned") for n in e.payload.partition.report.notes]


@pytest.mark.parametrize("how", ["plain", "reentrant", "selective"])
def test_checkpointed_blocks_train_as_in_eager(frontend, how):
    """The trace frontend cannot capture the reentrant form (an autograd.Function running the block under
    `torch.no_grad` and again in its backward): the model runs eagerly, visibly."""
    model = Stack(how=how)
    compiled = ember.compile(model, options={"frontend": frontend})
    x = torch.randn(4, 8, 32, requires_grad=True)
    with ember_core.record_events() as rec:
        assert_same_training_step(model, compiled, [x])
    expected = ["capture"] if (frontend, how) == ("trace", "reentrant") else []
    assert [e.stage for e in rec.kinds("fallback")] == expected


def test_dropout_in_a_checkpointed_block_draws_eagers_mask(frontend):
    """Eager's checkpoint draws the mask again in the backward from the same RNG state; ember keeps the forward's.
    Same seed, same numbers."""
    model = Stack(how="plain", p=0.5)
    compiled = ember.compile(model, options={"frontend": frontend})
    x = torch.randn(4, 8, 32, requires_grad=True)
    torch.manual_seed(3)
    eager = model(x)
    eager.sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    got = compiled(x)
    got.sum().backward()
    torch.testing.assert_close(got, eager)
    for w, p in zip(want, model.parameters()):
        torch.testing.assert_close(p.grad, w)


def test_checkpointed_blocks_keep_no_more_activations_than_eager(frontend):
    """Four checkpointed blocks: eager keeps each block's input (3 of them are activations, the first is x); so does
    ember, where without checkpointing both keep each block's hidden values."""
    torch.manual_seed(0)
    checkpointed = Stack(how="plain")
    plain = copy.deepcopy(checkpointed)
    plain.how = None
    x = torch.randn(16, 32, 32, requires_grad=True)
    eager = activation_bytes(checkpointed, x, list(checkpointed.parameters()))
    compiled = ember.compile(checkpointed, options={"frontend": frontend})
    notes = partition_notes(compiled, x)  # compiles outside the hooks
    ours = activation_bytes(compiled, x, list(checkpointed.parameters()))
    compiled_plain = ember.compile(plain, options={"frontend": frontend})
    compiled_plain(x).sum().backward()
    without = activation_bytes(compiled_plain, x, list(plain.parameters()))
    block_input = x.numel() * x.element_size()
    assert eager == 3 * block_input
    assert ours <= eager, (ours, eager)
    assert without > 4 * eager, (without, eager)  # the test can tell the two apart
    assert any("activation checkpointing: 4 region(s)" in n and "reads 3 value(s) between regions" in n
               for n in notes), notes


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_a_compiled_block_inside_an_eager_checkpoint_trains_as_in_eager(frontend, reentrant):
    """`checkpoint(compiled_block, x)`: the checkpoint's saved-tensor hooks are active while ember compiles (the
    first call, and again on the recomputation in the backward): ember's own traces saved tensors through them, and
    the recomputation's hook stopped the trace midway (`_StopRecomputationError`). Traces run with those hooks off
    (torch's `_saved_tensors_hooks_set_tracing`); they apply at run time, around ember's autograd.Function."""
    torch.manual_seed(0)
    block = Block()
    twin = copy.deepcopy(block)
    compiled = ember.compile(block, options={"frontend": frontend})
    x = torch.randn(4, 8, 32)
    got, want = x.clone().requires_grad_(), x.clone().requires_grad_()
    with ember_core.record_events() as rec:
        checkpoint(compiled, got, use_reentrant=reentrant).pow(2).sum().backward()
    checkpoint(twin, want, use_reentrant=reentrant).pow(2).sum().backward()
    torch.testing.assert_close(got.grad, want.grad)
    for p, q in zip(block.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_selective_checkpointing_keeps_the_matmuls_it_marks():
    """Dynamo's frontend. Under the trace frontend the policy marks nodes only where torch's selective-checkpoint
    mode does so under a trace (2.13 does, 2.11 does not: everything is then recomputed)."""
    model = Stack(how="selective")
    compiled = ember.compile(model)
    x = torch.randn(4, 8, 32, requires_grad=True)
    notes = partition_notes(compiled, x)
    # each block's two linears (addmm, or mm) are kept: the up projection's output is what gelu's gradient reads
    assert any("marked for saving" in n and "and 0 marked" not in n for n in notes), notes


@pytest.mark.gpu  # ember-core's pytest plugin skips it without CUDA; `./dev gpu` runs it
def test_checkpointed_blocks_train_as_in_eager_on_cuda_and_keep_what_eager_keeps():
    torch.manual_seed(0)
    model = Stack(how="plain").cuda()
    x = torch.randn(4, 8, 32, device="cuda", requires_grad=True)
    eager = activation_bytes(model, x, list(model.parameters()))
    compiled = ember.compile(model)
    with ember_core.record_events() as rec:
        assert_same_training_step(model, compiled, [x])
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]
    assert {e.get("codegen") for e in rec.events if e.kind == "graph_compiled"} == {"triton"}
    assert activation_bytes(compiled, x, list(model.parameters())) <= eager
