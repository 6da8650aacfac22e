"""The partitioner conformance kit, run on ember-core's reference partition (and shown to catch broken ones)."""

import pytest
from ember_core import Partition
from ember_core.testing import PartitionerConformance, RegionPartitioner


class TestRegionPartitioner(PartitionerConformance):
    partitioner = RegionPartitioner()


class Forgetful:
    """A broken partitioner: saves nothing, so the backward reads forward values it was never given."""

    def partition(self, joint, options):
        part = RegionPartitioner().partition(joint)
        n = joint.num_forward_outputs
        backward = part.backward.replace(inputs=part.backward.inputs[len(part.saved):])
        return Partition(part.forward.replace(outputs=part.forward.outputs[:n]), backward, (), part.report)


class WrongMath:
    """A broken partitioner: the backward's first multiplication became an addition."""

    def partition(self, joint, options):
        part = RegionPartitioner().partition(joint)
        nodes = list(part.backward.nodes)
        k = next(i for i, n in enumerate(nodes) if n.op == "aten.mul.Tensor")
        nodes[k] = nodes[k].replace(op="aten.add.Tensor")
        return Partition(part.forward, part.backward.replace(nodes=tuple(nodes)), part.saved, part.report)


class NoReport:
    def partition(self, joint, options):
        part = RegionPartitioner().partition(joint)
        return Partition(part.forward, part.backward, part.saved)


def kit(partitioner):
    return type("Kit", (PartitionerConformance,), {"partitioner": partitioner})()


def test_kit_catches_a_backward_reading_unsaved_values():
    with pytest.raises(AssertionError, match=r"pointwise_chain: the backward reads \[.*\] .*neither saved"):
        kit(Forgetful()).test_partition_keeps_the_layout("pointwise_chain")


def test_kit_catches_wrong_gradients():
    with pytest.raises(AssertionError, match=r"pointwise_chain: output 2 \(grad\)"):
        kit(WrongMath()).test_forward_then_backward_gives_the_joints_outputs("pointwise_chain")


def test_kit_requires_a_report():
    with pytest.raises(AssertionError, match="softmax: the partition has no report"):
        kit(NoReport()).test_partition_keeps_the_layout("softmax")


def test_kit_without_a_partitioner_fails_clearly():
    with pytest.raises(pytest.fail.Exception, match="Kit.partitioner is not set"):
        kit(None).test_partition_keeps_the_layout("softmax")


def test_kit_checks_the_protocol():
    with pytest.raises(AssertionError, match="object has no partition"):
        kit(object()).test_implements_the_partitioner_protocol()
