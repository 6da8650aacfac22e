"""The partitioner conformance kit: subclass `PartitionerConformance` in a plugin's tests.

    from ember_core.testing import PartitionerConformance

    class TestMyPartitioner(PartitionerConformance):
        partitioner = MyPartitioner()
        options = {"my.budget": 0.5}     # what partition(joint, options) receives (default: {})

The joint graphs are ember-core's own (`joint_case`: each battery case traced with `torch.autograd.grad`), plus a
few cases of the kit's (a buffer written in place, an input without a gradient, dropout), so the kit needs no
autograd plugin. Each is partitioned and checked: the `Partition` layout, saved values returned by the forward,
a backward that reads only saved values and tangents, a report, the joint graph left unchanged, and forward then
backward giving the joint's outputs (`torch.testing.assert_close`, random ops under one seed).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from .._errors import GraphError
from ..graph._fingerprint import fingerprint
from ..graph._schema import Graph, node_refs
from ..graph._verify import verify
from ..plugins._stages import JointGraph, Partition, Partitioner
from ._battery import battery_names
from ._joint import JointCase, joint_case, run_joint, run_partition, trace_joint

# ---------------------------------------------------------------------------------------------- the kit's cases


def _buffer_mutation():
    def f(x, w, buf):
        buf.add_(1)  # a running statistic: written in place, no gradient
        return ((x * w).sin() + buf).sum(1)

    return f, [*_x_and_w(), torch.zeros(8)], ["user", "param", "buffer"]


def _x_and_w() -> list:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 8, generator=g, requires_grad=True), torch.randn(8, generator=g, requires_grad=True)]


def _unused_input():
    def f(x, y):
        return (x.exp() * 2,)  # y requires grad but gets no gradient

    return f, _x_and_w(), None


def _dropout():
    def f(x, w):
        return (torch.nn.functional.dropout(x * w, p=0.5, training=True).relu().sum(1),)

    return f, _x_and_w(), None


KIT_CASES = {"buffer_mutation": _buffer_mutation, "unused_input": _unused_input, "dropout": _dropout}


@functools.cache
def partition_case(name: str) -> JointCase:
    """The joint graph of a battery case or of one of the kit's cases (cached)."""
    if name not in KIT_CASES:
        return joint_case(name)
    fn, primals, kinds = KIT_CASES[name]()
    return trace_joint(fn, primals, kinds, name=name)


class PartitionerConformance:
    """Base test class (pytest collects its subclasses). Set `partitioner`; optionally `options`, `rtol`/`atol`
    (None: assert_close's defaults) and `skip_cases` (case name → reason)."""

    partitioner: Any = None
    options: Mapping[str, Any] = {}
    rtol: float | None = None
    atol: float | None = None
    skip_cases: Mapping[str, str] = {}

    def _partition(self, name: str) -> tuple[JointCase, Partition]:
        if self.partitioner is None:
            pytest.fail(f"{type(self).__name__}.partitioner is not set: give it the partitioner object to test")
        if name in self.skip_cases:
            pytest.skip(self.skip_cases[name])
        case = partition_case(name)
        part = self.partitioner.partition(case.joint, dict(self.options))
        assert isinstance(part, Partition), (
            f"{name}: {type(self.partitioner).__name__}.partition returned {type(part).__name__}, "
            "not ember_core.Partition")
        return case, part

    def test_implements_the_partitioner_protocol(self) -> None:
        if self.partitioner is None:
            pytest.fail(f"{type(self).__name__}.partitioner is not set: give it the partitioner object to test")
        assert isinstance(self.partitioner, Partitioner), (
            f"{type(self.partitioner).__name__} has no partition(joint, options): see ember_core.Partitioner")

    @pytest.mark.parametrize("case_name", (*battery_names(), *KIT_CASES))
    def test_partition_keeps_the_layout(self, case_name: str) -> None:
        before = fingerprint(partition_case(case_name).joint.graph)
        case, part = self._partition(case_name)
        assert fingerprint(case.joint.graph) == before, f"{case_name}: partition changed the joint graph"
        assert_partition_layout(case.joint, part, case_name)

    @pytest.mark.parametrize("case_name", (*battery_names(), *KIT_CASES))
    def test_forward_then_backward_gives_the_joints_outputs(self, case_name: str) -> None:
        case, part = self._partition(case_name)
        assert_same_results(case, part, case_name, self.rtol, self.atol)


# ---------------------------------------------------------------------------------------------- checks


def assert_partition_layout(joint: JointGraph, part: Partition, where: str = "partition", *,
                            require_report: bool = True) -> None:
    """The `ember_core.Partition` contract, each broken rule named."""
    _check_forward(joint, part, where)
    _check_backward(joint, part, where)
    if require_report:
        assert part.report is not None and str(part.report), f"{where}: the partition has no report"
    for label, half in (("forward", part.forward), ("backward", part.backward)):
        try:
            verify(half)
        except GraphError as e:
            raise AssertionError(f"{where}: the {label} graph does not verify: {e}") from e


def _check_forward(joint: JointGraph, part: Partition, where: str) -> None:
    g, n = joint.graph, joint.num_forward_outputs
    primals = g.inputs[:joint.num_primals]
    assert _named(part.forward.inputs) == _named(primals), (
        f"{where}: forward inputs {_named(part.forward.inputs)} are not the joint's primals {_named(primals)}")
    outs = part.forward.outputs
    assert _kinds(outs[:n]) == _kinds(g.outputs[:n]), (
        f"{where}: forward outputs begin {_kinds(outs[:n])}, the joint's forward outputs are {_kinds(g.outputs[:n])}")
    saved = [(o.name, o.kind) for o in outs[n:]]
    assert saved == [(s, "saved") for s in part.saved], (
        f"{where}: the saved values {list(part.saved)} must be the forward's last outputs, of kind 'saved'; "
        f"they are {saved}")


def _check_backward(joint: JointGraph, part: Partition, where: str) -> None:
    g = joint.graph
    tangents = g.inputs[joint.num_primals:]
    want = [*((s, "saved") for s in part.saved), *((t.name, "tangent") for t in tangents)]
    got = [(i.name, i.kind) for i in part.backward.inputs]
    assert got == want, f"{where}: backward inputs are {got}; the saved values then the tangents are {want}"
    _check_backward_reads(part.backward, where)
    grads = g.outputs[joint.num_forward_outputs:]
    assert _kinds(part.backward.outputs) == _kinds(grads), (
        f"{where}: backward outputs {_kinds(part.backward.outputs)} are not the joint's gradients {_kinds(grads)}")


def _check_backward_reads(backward: Graph, where: str) -> None:
    known = set(backward.input_names) | set(backward.constants)
    for node in backward.nodes:
        stray = [r for r in node_refs(node) if r not in known]
        assert not stray, (f"{where}: the backward reads {stray} ({node.op}), neither saved, a tangent nor "
                           "computed in the backward")
        known.update(node.outputs)


def assert_same_results(case: JointCase, part: Partition, where: str = "partition", rtol: float | None = None,
                        atol: float | None = None) -> None:
    """Forward then backward on the case's inputs equals the joint graph, output by output."""
    want, got = run_joint(case), run_partition(case, part)
    assert len(got) == len(want), f"{where}: forward and backward give {len(got)} outputs, the joint {len(want)}"
    outputs = case.joint.graph.outputs
    for k, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m, k=k: f"{where}: output {k} ({outputs[k].kind}): {m}")


def _named(inputs) -> list[tuple[str, str]]:
    return [(i.name, i.kind) for i in inputs]


def _kinds(outputs) -> list[tuple[str, int | None]]:
    return [(o.kind, o.input) for o in outputs]
