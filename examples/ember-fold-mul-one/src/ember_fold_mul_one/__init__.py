"""A third-party ember plugin: the graph pass `fold-mul-one` drops multiplications by the constant 1.

It knows ember only through ember-core's public API and the `ember` entry-point group.
"""

from __future__ import annotations

from ember_core import Graph, Ref, hookimpl

__all__ = ["FoldMulOne", "ember_register"]

MUL_OPS = ("aten.mul.Tensor", "aten.mul.Scalar")


def _rename(arg, renames: dict[str, str]):
    if isinstance(arg, Ref):
        return Ref(renames.get(arg.name, arg.name))
    if isinstance(arg, tuple):
        return tuple(_rename(a, renames) for a in arg)
    return arg


class FoldMulOne:
    """`y = mul(x, 1)` where y has x's dtype and shape and is not a graph output: uses of y read x instead."""

    id = "fold-mul-one"

    def run(self, graph: Graph) -> Graph:
        outputs = {o.name for o in graph.outputs}
        renames: dict[str, str] = {}
        kept = []
        for node in graph.nodes:
            node = node.replace(args=_rename(node.args, renames),
                                kwargs={k: _rename(v, renames) for k, v in node.kwargs.items()})
            if self._foldable(graph, node, outputs):
                renames[node.outputs[0]] = node.args[0].name
                continue
            kept.append(node)
        if not renames:
            return graph
        values = {k: v for k, v in graph.values.items() if k not in renames}
        return graph.replace(nodes=tuple(kept), values=values)

    @staticmethod
    def _foldable(graph: Graph, node, outputs: set[str]) -> bool:
        if node.op not in MUL_OPS or len(node.args) != 2 or node.kwargs:
            return False
        x, one = node.args
        if not isinstance(x, Ref) or isinstance(one, bool) or one != 1 or node.outputs[0] in outputs:
            return False
        before, after = graph.values.get(x.name), graph.values[node.outputs[0]]
        return before is not None and (before.dtype, before.shape) == (after.dtype, after.shape)


@hookimpl
def ember_register(registry) -> None:
    registry.add("pass", "fold-mul-one", FoldMulOne(), point="post_capture")
