"""What the pre-lowering passes ask of a node that makes a tensor: is it a fill with zeros?"""

from __future__ import annotations

from ember_core import Node

_ZERO_FILLS = {"aten.full.default", "aten.zeros.default"}


def is_zero_fill(node: Node | None) -> bool:
    """`zeros(...)`, or `full(..., 0)` with its value given by position or by name."""
    if node is None or node.op not in _ZERO_FILLS:
        return False
    if node.op == "aten.zeros.default":
        return True
    value = node.args[1] if len(node.args) > 1 else node.kwargs.get("fill_value")
    return isinstance(value, (bool, int, float)) and value == 0
