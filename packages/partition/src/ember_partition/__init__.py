"""ember-partition: joint forward+backward graph → forward graph, backward graph and saved values.

`DefaultPartitioner` saves every forward value the backward reads. `MinCutPartitioner` picks the saved values by
max-flow min-cut over the joint graph, recomputing cheap ops in the backward to save fewer bytes.
"""

from ._assemble import VERSION as __version__
from ._cost_model import CLASSES, op_class
from ._default import DefaultPartitioner
from ._diagram import joint_diagram, render_svg, write_diagram
from ._joint import JointInfo, analyze
from ._max_flow import Cut, FlowNetwork
from ._mincut import MinCutPartitioner
from ._report import PartitionReport, RecomputedOp, SavedValue
from ._sizes import nbytes

__all__ = [
    "CLASSES", "Cut", "DefaultPartitioner", "FlowNetwork", "JointInfo", "MinCutPartitioner", "PartitionReport",
    "RecomputedOp", "SavedValue", "__version__", "analyze", "joint_diagram", "nbytes", "op_class", "render_svg",
    "write_diagram",
]
