"""The scheduler end to end: how many kernels the common patterns become, decisions with reasons, and golden
snapshots of the fused loop IR (tests/snapshots/, rewritten by `EMBER_ACCEPT=1 pytest ...`; review the diff)."""

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from ember_core.testing import assert_golden
from ember_lowering import Decision, Loop, LoweringError, Op, PlanError, lower, lower_graph, schedule
from lowering_checks import check, count_ops, trace

SNAPSHOTS = Path(__file__).parent / "snapshots"
torch.manual_seed(0)
X = torch.randn(8, 32)


def decomposed_softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def decomposed_layer_norm(x, w, b):
    var, mean = torch.var_mean(x, -1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + 1e-5) * w + b


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def gelu_mlp(x, w1, b1, w2, b2):
    return F.gelu(x @ w1 + b1) @ w2 + b2


def test_softmax_is_at_most_two_kernels():
    assert len(check(lambda x: torch.softmax(x, -1), X).kernels) <= 2
    assert len(check(decomposed_softmax, X).kernels) <= 2
    assert len(check(lambda x: torch.log_softmax(x, 0), X, mode="symbolic").kernels) <= 2


def test_layer_norm_is_at_most_two_kernels():
    w, b = torch.randn(32), torch.randn(32)
    assert len(check(lambda x, w, b: F.layer_norm(x, (32,), w, b), X, w, b).kernels) <= 2
    assert len(check(decomposed_layer_norm, X, w, b).kernels) <= 2


def test_rms_norm_is_at_most_two_kernels():
    assert len(check(rms_norm, X, torch.randn(32)).kernels) <= 2
    assert len(check(rms_norm, X, torch.randn(32), mode="symbolic").kernels) <= 2


def test_a_pointwise_chain_is_one_kernel():
    plan = check(lambda x: ((x * 2 + 1).sigmoid() - 0.5).tanh(), X)
    assert len(plan.kernels) == 1 and len(plan.buffers) == 2


def test_a_gelu_mlp_keeps_matmuls_extern_and_fuses_the_epilogues():
    args = (X, torch.randn(32, 64), torch.randn(64), torch.randn(64, 16), torch.randn(16))
    plan = check(gelu_mlp, *args)
    assert [e.op for e in plan.externs] == ["aten.mm.default", "aten.mm.default"]
    assert len(plan.kernels) == 2


def test_an_expensive_value_with_two_consumers_is_computed_once():
    plan = check(lambda x: (lambda y: (y.sum(0), y.sum(1)))(x.sin().exp().tanh()), X)
    assert count_ops(plan, Op.SIN) == 1 and count_ops(plan, Op.EXP) == 1


def test_a_cheap_value_with_two_consumers_is_recomputed_not_stored():
    plan = check(lambda x: (lambda y: (y.sum(0), y.sum(1)))(x * 2 + 1), X)
    assert all(b.kind in ("input", "output") for b in plan.buffers)


def test_decisions_are_logged_with_reasons(caplog):
    decisions = []
    with caplog.at_level(logging.DEBUG, logger="ember.kernels"):
        schedule(lower_graph(trace(lambda x: (lambda y: (y.sum(0), y.sum(1)))(x.sin().exp().tanh()), X)),
                 decisions=decisions)
    fields = {(d.pass_id, d.verdict, d.reason) for d in decisions}
    assert {("fuse-inline", "kept", "expensive"), ("fuse-inline", "fused", "single-consumer")} <= fields
    assert "fuse-inline: kept" in caplog.text


def test_passes_are_stamped_and_kernels_named_by_kind_and_shape():
    plan = lower(trace(lambda x: (x.exp(), x.sum(1), x.t().sin()), X), emit_event=False)
    assert plan.passes == ("lower", "fuse-inline", "fuse-vertical", "fuse-siblings", "keep-float32", "order-dims",
                           "coalesce-dims", "split-moments", "stash-values", "extern-in-place", "bound-indices",
                           "cat-in-place", "plan-buffers")
    # sin's result is transposed like its input (eager keeps the layout): one walk of both in storage order
    assert sorted(k.name for k in plan.kernels) == ["pointwise_256", "reduce_8x32"]


def test_snapshot_softmax():
    plan = lower(trace(lambda x: torch.softmax(x, -1), torch.randn(4, 8), mode="symbolic", name="softmax"),
                 check=True, emit_event=False)
    assert_golden(str(plan), SNAPSHOTS / "softmax.txt")


def test_softmax_stashes_its_exp_and_keeps_no_dead_value():
    plan = lower(trace(lambda x: torch.softmax(x, -1), torch.randn(4, 8), name="softmax"), check=True,
                 emit_event=False)
    (kernel,) = plan.kernels
    assert [(b.name, b.kind) for b in plan.buffers if b.kind == "local"] == [("stash0", "local")]
    *_, last = [s for s in kernel.body if isinstance(s, Loop)]
    # the reciprocal of the row sum is computed once, before the loop (as eager's kernel does)
    assert [(i.op, i.buffer) for i in last.body] == [(Op.LOAD, "stash0"), (Op.MUL, None), (Op.STORE, "_softmax")]
    assert_golden(str(plan), SNAPSHOTS / "softmax_static.txt")


def test_snapshot_layer_norm():
    graph = trace(lambda x, w, b: F.layer_norm(x, (8,), w, b), torch.randn(4, 8), torch.randn(8), torch.randn(8),
                  name="layer_norm")
    assert_golden(str(lower(graph, check=True, emit_event=False)), SNAPSHOTS / "layer_norm.txt")


def test_snapshot_mean_over_h_and_w_walks_them_as_one_dim():
    graph = trace(lambda x: x.mean((2, 3)), torch.randn(2, 3, 4, 4), name="mean_hw")
    plan = lower(graph, check=True, emit_event=False)
    assert [str(d.size) for d in plan.kernels[0].dims] == ["6", "16"]
    assert_golden(str(plan), SNAPSHOTS / "mean_hw.txt")


def test_snapshot_gelu_mlp_epilogue():
    args = (torch.randn(4, 8), torch.randn(8, 16), torch.randn(16), torch.randn(16, 8), torch.randn(8))
    graph = trace(gelu_mlp, *args, name="gelu_mlp")
    assert_golden(str(lower(graph, check=True, emit_event=False)), SNAPSHOTS / "gelu_mlp.txt")


class _Chatty:
    id = "chatty"
    reasons = frozenset({"known"})

    def __init__(self, verdict: str, reason: str):
        self.verdict, self.reason = verdict, reason

    def run(self, plan, note):
        note(self.verdict, self.reason, ("k",), "for people")
        return plan


def test_decisions_are_structured_and_checked_against_the_passs_reasons():
    plan, decisions = lower_graph(trace(lambda x: x + 1, X)), []
    schedule(plan, passes=[_Chatty("kept", "known")], decisions=decisions)
    assert decisions == [Decision("chatty", "kept", "known", ("k",), "for people")]
    for verdict, reason in (("kept", "unknown"), ("pondered", "known")):
        with pytest.raises(LoweringError, match="chatty"):
            schedule(plan, passes=[_Chatty(verdict, reason)])


class _ReadBeforeWrite:
    """A broken pass: runs the steps in reverse order, so a kernel loads a temp before the kernel storing it runs
    (the loop-folding bug did this inside one kernel)."""

    id = "read-before-write"

    def run(self, plan, note):
        return plan.replace(steps=plan.steps[::-1])


def test_a_plan_a_pass_broke_is_refused_before_any_codegen_sees_it():
    """Without `check`, the plan was verified only when read back from the plan cache: a fusion bug that loaded a
    buffer before storing it reached the C++ codegen and computed garbage. `lower` now verifies what it returns,
    so such a graph falls back (the codegens run their graph in the interpreter on any lowering error)."""
    graph = trace(lambda x: torch.softmax(x, -1) * 2, X)
    assert lower(graph, emit_event=False)  # the real passes make a valid plan
    with pytest.raises(PlanError, match="before any step writes it"):
        lower(graph, passes=(_ReadBeforeWrite(),), emit_event=False)
