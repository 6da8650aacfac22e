"""ember-core's partitioner conformance kit, run on both of ember's partitioners."""

from ember_core.testing import PartitionerConformance
from ember_partition import DefaultPartitioner, MinCutPartitioner


class TestDefaultPartitioner(PartitionerConformance):
    partitioner = DefaultPartitioner()


class TestMinCutPartitioner(PartitionerConformance):
    partitioner = MinCutPartitioner()


class TestMinCutPartitionerUnderABudget(PartitionerConformance):
    partitioner = MinCutPartitioner()
    options = {"partition.memory_budget": 0.25}
