"""Activations oneDNN's fused convolution and linear ops apply in their epilogue, found after a node's result.

An activation is one node (`aten.relu`, `aten.gelu` ...: `epilogue_rules`) or a chain capture decomposes it into
(SiLU is `y * sigmoid(y)`, Hardswish `y * clamp(y + 3, 0, 6) / 6`: `epilogue_chains`). It fuses when it alone reads
the result and each step of the chain is read only by the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember_core import Graph, Node, Ref


@dataclass(frozen=True)
class Epilogue:
    attr: str  # oneDNN's name: relu, gelu, swish, hardswish ...
    scalars: tuple[float, ...]
    algorithm: str  # gelu's approximation, else ""
    final: str  # the value the fused op now gives
    absorbed: tuple[int, ...]  # indices of the nodes it replaces


def _gelu(node: Node) -> tuple[str, tuple, str] | None:
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return ("gelu", (), approximate) if approximate in ("none", "tanh") and len(node.args) <= 2 else None


def _scalars(attr: str, defaults: tuple[float, ...]):
    def rule(node: Node) -> tuple[str, tuple, str] | None:
        given = (*node.args[1:], *defaults[len(node.args) - 1:])
        if node.kwargs or len(given) != len(defaults) or not all(isinstance(s, (int, float)) for s in given):
            return None  # keyword arguments, or a symbolic value
        return attr, tuple(float(s) for s in given), ""
    return rule


def _plain(attr: str):
    return lambda node: (attr, (), "") if len(node.args) == 1 and not node.kwargs else None


# op of one node → (attr, scalars, algorithm) of the node, or None when it cannot be fused
epilogue_rules = {
    "aten.relu.default": _plain("relu"), "aten.sigmoid.default": _plain("sigmoid"), "aten.tanh.default": _plain("tanh"),
    "aten.silu.default": _plain("swish"), "aten.hardswish.default": _plain("hardswish"),
    "aten.hardsigmoid.default": _plain("hardsigmoid"), "aten.gelu.default": _gelu,
    "aten.hardtanh.default": _scalars("hardtanh", (-1.0, 1.0)), "aten.leaky_relu.default": _scalars("leaky_relu",
                                                                                                    (0.01,)),
}

# attr → the chain of (op, arguments) it is captured as: "y" is the result fused into, "prev" the step before
_CLAMP_0_6 = (("aten.add.Tensor", ("y", 3)), ("aten.clamp.default", ("prev", 0)),
              ("aten.clamp.default", ("prev", None, 6)))
epilogue_chains = {
    "swish": (("aten.sigmoid.default", ("y",)), ("aten.mul.Tensor", ("y", "prev"))),
    "hardswish": (*_CLAMP_0_6, ("aten.mul.Tensor", ("y", "prev")), ("aten.div.Tensor", ("prev", 6))),
    "hardsigmoid": (*_CLAMP_0_6, ("aten.div.Tensor", ("prev", 6))),
}


def _fits(node: Node, op: str, pattern: tuple, names: dict[str, str]) -> bool:
    if node.op != op or node.kwargs or len(node.args) != len(pattern):
        return False
    want = [Ref(names[p]) if p in names else p for p in pattern]
    return list(node.args) == want or (op == "aten.mul.Tensor" and list(node.args) == want[::-1])


def _chain(graph: Graph, y: str, read: dict[str, list[int]], outputs: set[str], steps: tuple) -> list[int] | None:
    """Indices of the nodes of the chain `steps` after `y`, or None when the graph does not hold it."""
    names, found, at = {"y": y}, [], None
    for op, pattern in steps:
        candidates = read.get(names.get("prev", y), [])
        at = next((j for j in candidates if j not in found and _fits(graph.nodes[j], op, pattern, names)), None)
        if at is None:
            return None
        prev = names.get("prev")
        if prev is not None and (prev in outputs or read.get(prev) != [at]):
            return None  # a step's result is read elsewhere
        found.append(at)
        names["prev"] = graph.nodes[at].outputs[0]
    if set(read.get(y, [])) - set(found):
        return None
    return found


def match_epilogue(graph: Graph, y: str, read: dict[str, list[int]], outputs: set[str]) -> Epilogue | None:
    """The activation applied to `y` alone, fusable into the op that gives `y`; None when there is none."""
    users = read.get(y, [])
    if y in outputs or not users:
        return None
    if len(users) == 1:
        node = graph.nodes[users[0]]
        rule = epilogue_rules.get(node.op)
        got: Any = rule(node) if rule and len(node.outputs) == 1 and node.args[0] == Ref(y) else None
        if got is not None:
            return Epilogue(*got, node.outputs[0], (users[0],))
    for attr, steps in epilogue_chains.items():
        found = _chain(graph, y, read, outputs, steps)
        if found is not None:
            return Epilogue(attr, (), "", graph.nodes[found[-1]].outputs[0], tuple(found))
    return None
