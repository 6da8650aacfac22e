"""Pass `fold-constants`: a node that reads only constants is run once, with eager ATen, and becomes a constant.

Only work derived from the graph's constants is folded (a transposed weight, `weight * scale`, a cast), never a
node that reads no value at all (a factory like `zeros` or `arange`: folding it only costs memory). Left in the
graph: random and effectful ops, symbolic sizes, graph outputs (a constant returned would be shared by every call)
and results that broadcast (an `expand` would be stored at its full size)."""

from __future__ import annotations

from typing import Any

import torch
from ember_core import (
    Constant,
    Graph,
    Node,
    Ref,
    Sym,
    has_effect,
    is_custom_function,
    is_random,
    map_args,
    node_callable,
    node_refs,
)

from ._edit import output_names

PASS_ID = "fold-constants"


def _has_sym(args: tuple) -> bool:
    found: list[bool] = []
    map_args(args, lambda a: found.append(isinstance(a, Sym)))
    return any(found)


def _foldable(node: Node, constants: dict[str, Constant], outputs: set[str]) -> bool:
    refs = list(node_refs(node))
    if not refs or any(r not in constants for r in refs) or outputs.intersection(node.outputs):
        return False
    if _has_sym((node.args, tuple(node.kwargs.values()))) or is_custom_function(node.op):
        return False
    return not node.op.startswith("ember.") and not is_random(node.op) and not has_effect(node.op)


def _read(arg: Any, constants: dict[str, Constant]) -> Any:
    if isinstance(arg, tuple):
        return [_read(a, constants) for a in arg]
    return constants[arg.name].tensor if isinstance(arg, Ref) else arg


def _run(graph: Graph, node: Node, constants: dict[str, Constant]) -> list[torch.Tensor] | None:
    """The node's results on the constants, or None when they cannot be constants."""
    args = [_read(a, constants) for a in node.args]
    kwargs = {k: _read(v, constants) for k, v in node.kwargs.items()}
    with torch.no_grad():
        result = node_callable(graph, node)(*args, **kwargs)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(node.outputs) or not all(isinstance(t, torch.Tensor) for t in results):
        return None
    if any(st == 0 and n > 1 for t in results for n, st in zip(t.shape, t.stride())):
        return None  # broadcast: smaller as the op than as its result
    return results


class FoldConstants:
    """The graph pass (point `freeze`): `fold_constants`."""

    id = "fold-constants"

    def run(self, graph: Graph) -> Graph:
        return fold_constants(graph)[0]

    @staticmethod
    def summary(before: Graph, after: Graph) -> dict[str, int]:
        return {"folded_constants": len(before.nodes) - len(after.nodes)}  # each folded node is gone


def fold_constants(graph: Graph) -> tuple[Graph, int]:
    """`graph` with every foldable node replaced by constants; and how many nodes were folded."""
    constants, values = dict(graph.constants), dict(graph.values)
    outputs = output_names(graph)
    nodes: list[Node] = []
    folded = 0
    for node in graph.nodes:
        results = _run(graph, node, constants) if _foldable(node, constants, outputs) else None
        if results is None:
            nodes.append(node)
            continue
        folded += 1
        for name, t in zip(node.outputs, results):
            constants[name] = Constant(name, t)
            values.pop(name, None)
    return graph.replace(nodes=tuple(nodes), constants=constants, values=values), folded
