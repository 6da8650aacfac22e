"""Pass `fold-batch-norm`: an eval-mode batch norm after a convolution (or a linear layer) is folded into it.

    y = (conv(x, W) + b - mean) / sqrt(var + eps) * gamma + beta  =  conv(x, W * s) + (b - mean) * s + beta,
    s = gamma / sqrt(var + eps)

A batch norm folds when it is `aten._native_batch_norm_legit_no_training` (what capture makes of `BatchNorm*d` in
eval mode) or `aten.native_batch_norm` with training False, only its normalized output is read, its producer's
result is read by it alone (size queries aside), and every tensor of the two (weight, bias, statistics) is a
constant. Producers: a non-transposed `aten.convolution`, and `aten.addmm` /
`aten.mm` with a constant `(in, out)` weight (a linear layer whose `permute` of the weight was folded) on 2-d input.
The new weight and bias are computed once, in float32, and cast back to the weight's dtype."""

from __future__ import annotations

from typing import Any

import torch
from ember_core import Constant, Graph, Node, Ref, fresh_name, prune_values, rename_reads, resolve_op

from ._edit import add_constant, constant_of, output_names, readers

PASS_ID = "fold-batch-norm"
BATCH_NORMS = ("aten._native_batch_norm_legit_no_training.default", "aten.native_batch_norm.default")
CONVOLUTION = "aten.convolution.default"
LINEARS = ("aten.addmm.default", "aten.mm.default")
SIZE_OPS = ("aten.sym_size.int", "aten.sym_numel.default")


def _bound(node: Node) -> dict[str, Any]:
    """The node's arguments by their schema names."""
    names = [a.name for a in resolve_op(node.op)._schema.arguments]
    return {**dict(zip(names, node.args)), **node.kwargs}


def _scale_shift(graph: Graph, bn: Node) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(s, beta - mean * s) of an eval-mode batch norm whose tensors are all constants, in float32; else None."""
    a = _bound(bn)
    if a.get("training", False) is not False or not isinstance(a.get("eps"), float):
        return None
    gamma, beta, mean, var = (constant_of(graph, a.get(k)) for k in ("weight", "bias", "running_mean", "running_var"))
    if mean is None or var is None or any(a.get(k) is not None and t is None
                                          for k, t in (("weight", gamma), ("bias", beta))):
        return None
    s = torch.rsqrt(var.float() + a["eps"])
    if gamma is not None:
        s = s * gamma.float()
    shift = -mean.float() * s + (beta.float() if beta is not None else 0.0)
    return s, shift


def _fold_conv(graph: Graph, conv: Node, s: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                                          list[Any]] | None:
    w, b = constant_of(graph, conv.args[1]), constant_of(graph, conv.args[2])
    if w is None or (conv.args[2] is not None and b is None) or conv.args[6] is not False or conv.kwargs:
        return None
    weight = (w.float() * s.reshape(-1, *[1] * (w.dim() - 1))).to(w.dtype)
    bias = ((b.float() * s if b is not None else 0.0) + shift).to(w.dtype)
    return weight, bias, list(conv.args)


def _fold_linear(graph: Graph, mm: Node, s: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                                         list[Any]] | None:
    with_bias = mm.op == "aten.addmm.default"
    args = list(mm.args)
    if mm.kwargs or len(args) != (3 if with_bias else 2):
        return None
    if not with_bias:
        args = [None, *args]
    w, b = constant_of(graph, args[2]), constant_of(graph, args[0])
    x = graph.values[args[1].name] if isinstance(args[1], Ref) else None
    if w is None or w.dim() != 2 or (with_bias and (b is None or b.dim() != 1)) or x is None or len(x.shape) != 2:
        return None
    weight = (w.float() * s.reshape(1, -1)).to(w.dtype)
    bias = ((b.float() * s if b is not None else 0.0) + shift).to(w.dtype)
    return weight, bias, args


def _fold_one(graph: Graph, bn: Node, producer: Node, constants: dict[str, Constant], values: dict,
              taken: set[str]) -> Node | None:
    """The producer rewritten to give the batch norm's result, its new constants stored; else None."""
    ss = _scale_shift(graph, bn)
    if ss is None:
        return None
    is_conv = producer.op == CONVOLUTION
    folded = (_fold_conv if is_conv else _fold_linear)(graph, producer, *ss)
    if folded is None:
        return None
    weight, bias, args = folded
    out = bn.outputs[0]
    w_at, b_at = (1, 2) if is_conv else (2, 0)
    args[w_at] = add_constant(constants, fresh_name(graph, f"{out}_weight", taken), weight)
    args[b_at] = add_constant(constants, fresh_name(graph, f"{out}_bias", taken), bias)
    values[out] = values[producer.outputs[0]]  # the layout the producer gives
    op = producer.op if is_conv else "aten.addmm.default"
    return producer.replace(op=op, outputs=(out,), args=tuple(args))


class FoldBatchNorm:
    """The graph pass (point `freeze`): `fold_batch_norm`."""

    id = "fold-batch-norm"

    def run(self, graph: Graph) -> Graph:
        return fold_batch_norm(graph)[0]

    @staticmethod
    def summary(before: Graph, after: Graph) -> dict[str, int]:
        def count(g: Graph) -> int:
            return sum(n.op in BATCH_NORMS for n in g.nodes)
        return {"folded_batch_norms": count(before) - count(after)}


def fold_batch_norm(graph: Graph) -> tuple[Graph, int]:
    """`graph` with every foldable batch norm folded into its producer; and how many were folded."""
    read, outputs = readers(graph), output_names(graph)
    made_by = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    nodes: list[Node | None] = list(graph.nodes)
    constants, values, taken = dict(graph.constants), dict(graph.values), set()
    folded = 0
    for i, bn in enumerate(graph.nodes):
        x = bn.args[0] if bn.op in BATCH_NORMS and bn.args else None
        if not isinstance(x, Ref) or x.name not in made_by or x.name in outputs:
            continue
        sizes = [j for j in read[x.name] if graph.nodes[j].op in SIZE_OPS]  # the same sizes as the result's
        if [j for j in read[x.name] if j not in sizes] != [i]:
            continue
        if any(read.get(o) or o in outputs for o in bn.outputs[1:]):
            continue
        j = made_by[x.name]
        producer = nodes[j]
        if producer is None or producer.op not in (CONVOLUTION, *LINEARS) or len(producer.outputs) != 1:
            continue
        new = _fold_one(graph.replace(constants=constants), bn, producer, constants, values, taken)
        if new is not None:
            nodes[j], nodes[i] = new, None
            for k in sizes:
                nodes[k] = rename_reads(nodes[k], {x.name: new.outputs[0]})
            folded += 1
    kept = tuple(n for n in nodes if n is not None)
    return prune_values(graph.replace(nodes=kept, constants=constants, values=values)), folded
