"""What recomputing an op costs. Every op falls in one class; the class says whether the min-cut may recompute it
and how its cost is estimated.

| class      | recompute                                   | examples                                          |
|------------|---------------------------------------------|---------------------------------------------------|
| view       | free, and its result is never saved          | view, t, permute, expand, slice, split, detach    |
| size       | free (arithmetic on symbolic sizes, scalars) | sym_size, operator.mul, _local_scalar_dense       |
| pointwise  | cheap: fuses into its consumer               | add, mul, gelu, where, clone, cat, full, index    |
| reduction  | only under a memory budget below 1, weighted | sum, amax, _softmax, native_layer_norm            |
| opaque     | only under a memory budget below 1, weighted | any op no table knows                             |
| expensive  | never                                        | mm, bmm, addmm, convolution, attention            |
| random     | never: the backward must see the same draw  | native_dropout, rand_like, bernoulli              |
| mutating   | never                                        | add_, copy_                                       |
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import torch
from ember_core import Graph, GraphError, Node, resolve_op

from ._refs import iter_refs, node_reads
from ._sizes import numel

CLASSES = ("view", "size", "pointwise", "reduction", "opaque", "expensive", "random", "mutating")
FREE = frozenset({"view", "size", "pointwise"})  # recomputed at memory budget 1
WEIGHTED = frozenset({"reduction", "opaque"})  # recomputed only below budget 1, at a cost
BANNED = frozenset({"expensive", "random", "mutating"})  # never recomputed

# Op packets (`aten.<name>`) by class, where tags and schemas do not say enough.
EXPENSIVE_OPS = frozenset("""
    mm bmm addmm baddbmm addbmm addmv mv dot vdot matmul linear _int_mm _scaled_mm einsum
    convolution _convolution conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d
    cudnn_convolution mkldnn_convolution convolution_backward upsample_bilinear2d
    scaled_dot_product_attention _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
    _scaled_dot_product_fused_attention_overrideable
    _flash_attention_forward _efficient_attention_forward _flash_attention_backward _efficient_attention_backward
""".split())
RANDOM_OPS = frozenset("""
    native_dropout dropout feature_dropout alpha_dropout _fused_dropout rand rand_like randn randn_like randint
    randint_like randperm bernoulli normal uniform exponential cauchy geometric log_normal multinomial poisson
    rrelu_with_noise
""".split())
VIEW_OPS = frozenset("_unsafe_view reshape view_as lift_fresh".split())  # alias at run time; the schema may not say
POINTWISE_OPS = frozenset("""
    clone _to_copy copy to full full_like zeros zeros_like ones ones_like empty empty_like empty_strided new_empty
    new_empty_strided new_zeros new_ones new_full scalar_tensor arange iota cat stack constant_pad_nd index
    index_select gather embedding slice_scatter select_scatter diagonal_scatter as_strided_scatter repeat flip roll
    tril triu masked_fill where lift_fresh_copy fill alias_copy view_copy permute_copy expand_copy t_copy
    unsqueeze_copy squeeze_copy transpose_copy split_with_sizes_copy _unsafe_index broadcast_tensors
""".split())
REDUCTION_OPS = frozenset("""
    _softmax _log_softmax softmax log_softmax _softmax_backward_data _log_softmax_backward_data native_layer_norm
    native_group_norm native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional
    _native_batch_norm_legit_no_training cumsum cumprod logsumexp var_mean var std std_mean norm topk sort max min
    argmax argmin any all prod mean sum amax amin
""".split())


@functools.cache
def op_class(op: str) -> str:
    """The class of an op name (`aten.mul.Tensor`), one of `CLASSES`."""
    try:
        target = resolve_op(op)
    except GraphError:
        return "opaque"
    if not isinstance(target, torch._ops.OpOverload):
        return "size"  # operator.*, math.*, torch.sym_*
    schema, packet = target._schema, target._schema.name.split("::")[-1]
    tags = set(target.tags)
    if schema.is_mutable:
        return "mutating"
    if packet in EXPENSIVE_OPS:
        return "expensive"
    if torch.Tag.nondeterministic_seeded in tags or packet in RANDOM_OPS:
        return "random"
    if _returns_alias(schema) or packet in VIEW_OPS:
        return "view"
    if _returns_only_sizes(schema):
        return "size"
    if torch.Tag.pointwise in tags or packet in POINTWISE_OPS:
        return "pointwise"
    if torch.Tag.reduction in tags or packet in REDUCTION_OPS:
        return "reduction"
    return "opaque"


def written_args(node: Node) -> tuple[str, ...]:
    """The values an in-place (or out=) op writes, read off its schema's write annotations."""
    target = resolve_op(node.op)
    if not isinstance(target, torch._ops.OpOverload):
        return ()
    written = []
    for k, arg in enumerate(target._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.kwargs.get(arg.name) if arg.kwarg_only or k >= len(node.args) else node.args[k]
        written.extend(iter_refs(value))
    return tuple(written)


def _returns_alias(schema: torch.FunctionSchema) -> bool:
    info = schema.returns[0].alias_info if schema.returns else None
    return info is not None and not info.is_write


def _returns_only_sizes(schema: torch.FunctionSchema) -> bool:
    kinds = (torch.IntType, torch.SymIntType, torch.FloatType, torch.BoolType, torch.NumberType)  # Number: `.item()`
    return bool(schema.returns) and all(isinstance(r.type, kinds) for r in schema.returns)


def recompute_flops(node: Node, graph: Graph, symbol_hints: Mapping[str, int]) -> int:
    """Estimated element operations to run `node` again: outputs for pointwise ops, inputs and outputs for
    reductions and unknown ops, nothing for views and sizes. (Expensive ops are never recomputed.)"""
    cls = op_class(node.op)
    if cls in ("view", "size"):
        return 0
    out = sum(numel(graph.values[o], symbol_hints) for o in node.outputs)
    if cls == "pointwise":
        return out
    ins = sum(numel(graph.values[r], symbol_hints) for r in node_reads(node) if r in graph.values)
    return ins + out
