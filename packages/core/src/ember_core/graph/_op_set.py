"""The op set of every ember graph: torch's core ATen decompositions, minus those of random ops.

Capture and autograd both trace with `decompositions()`, so every stage sees the same ops (capture with
`capture_decompositions()`, which keeps a norm's backward whole where a captured backward may be differentiated
again: `STATISTICS_BACKWARDS`).

A decomposition of a random op (`aten.bernoulli.default` → `rand_like(x) < x`) draws different random numbers from
the op it replaces, so the compiled graph would no longer match eager under the same seed. Ops tagged
`nondeterministic_seeded` therefore stay as they are; `aten.native_dropout` is not in the core table at all.

Ops whose decomposition is numerically worse than eager's kernel and derivative stay one ATen call too
(`NUMERICALLY_KEPT`, each with its reason): the graph then runs eager's kernel (an extern call, unless lowering
has a rule as accurate), and the joint trace differentiates it with eager's formula. A few of them torch also
decomposes above autograd, by a Python kernel at the Autograd key that the Python dispatcher of a trace runs
(softshrink): capture and the joint trace set those kernels aside (`eager_derivatives` in execution/_tracing.py)
so that eager's formula is the one differentiated there too. `aten.detach` stays too (`MEANING_KEPT`): its
decomposition, `aten.alias`, would let the gradient through.

`aten._neg_view` and `aten._conj` (what `z.conj().imag`, `torch._neg_view` and `z.conj()` trace to) are views that
only set a bit ATen applies as it reads the tensor; kernels that read the storage would drop it, so they become the
ops that compute the values (`neg`, `conj_physical`: `sign_bit_values`).

`index_put(..., accumulate=True)` in a 16-bit float type (what the gradient of `index_select`, `embedding` and
advanced indexing becomes) accumulates in float32 and rounds once (`accurate_accumulation`): ATen's kernel adds
one element at a time in bfloat16, so a gradient summed from many rows drifts by ulps from eager's (whose
`index_add` rounds less often) and from the exact sum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions

from .._errors import GraphError
from ._ops import resolve_op


def is_random(op: Any) -> bool:
    """Whether an ATen overload (or its schema name, `aten.native_dropout.default`) draws from the random generator."""
    if isinstance(op, str):
        try:
            op = resolve_op(op)
        except GraphError:
            return False
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


# op name → why its decomposition is not used.
NUMERICALLY_KEPT: dict[str, str] = {
    # where(x < 1, log(erfcx(-x/√2)/2) - x²/2, log1p(-erfc(x/√2)/2)): for x ≪ 0 the branch not taken is
    # log1p(-1) = -inf, and its derivative 0/0 = NaN leaks through where's backward (NaN·0); eager's derivative
    # exp(-(log_ndtr(x) + x²/2))/√(2π) is finite there.
    "aten.special_log_ndtr.default": "the unselected branch of its where has a NaN derivative for x << 0",
    # where(row all -inf, 0, softmax(x)): the softmax of a fully masked row is NaN, and the softmax backward that
    # autograd derives from the decomposition multiplies it (0·NaN); eager's derivative reads the safe output (0)
    "aten._safe_softmax.default": "a fully masked row's gradient is NaN through the decomposition (0 in eager)",
    # x * where(norm > maxnorm, maxnorm / (norm + 1e-7), 1) cast to x's dtype: in bfloat16 the derivative autograd
    # takes of it rounds sum(x * grad) to bfloat16 and adds two bfloat16 terms; eager's renorm_backward sums in
    # float32 and rounds once
    "aten.renorm.default": "its bfloat16 gradient through the decomposition rounds twice more than eager's",
    # torch 2.14's core table decomposes it: pow(sum(|x|^p), 1/p), or sum(x != 0) for p = 0. Autograd through that
    # is NaN where the norm (or, for p < 1, an element) is 0 (sqrt'(0)·0, |0|^(p-1)·0), and the p = 0 norm no
    # longer requires grad at all; eager's norm_backward gives the subgradient 0 there, and a zero gradient for p = 0
    "aten.linalg_vector_norm.default": "its gradient through the decomposition is NaN at zero (0 in eager) and the "
                                       "p = 0 norm loses requires_grad",
    # x * clamp(x + 3, 0, 6) / 6: clamp passes the gradient at its bounds, so the derivative at x = -3 is -0.5 and
    # at x = 3 is 1.5 (the one-sided slopes of the middle piece); eager's hardswish_backward gives 0 and 1 there
    # (values exactly ±3 are common in bfloat16). The joint then takes eager's formula, whose decomposition agrees
    "aten.hardswish.default": "its gradient through the decomposition at x = ±3 differs from eager's (-0.5/1.5 "
                              "against 0/1)",
    # clamp(x + 3, 0, 6) / 6: 1/6 at x = ±3, where eager's hardsigmoid_backward gives 0 (an open interval)
    "aten.hardsigmoid.default": "its gradient through the decomposition at x = ±3 is 1/6 (0 in eager)",
    # where(isnan(y), nan, where(x == 0, 0, x * log(y))): where's backward gives x the gradient 0 at x = 0, and
    # at x = y = 0 the unselected branch's derivative for y, log(0) · 0 = NaN, leaks through it; eager's
    # derivative for x is log(y) at x = 0 (0 only where y <= 0), its derivative for y 0 at x = y = 0. xlog1py is
    # the same with log1p(y) (0 only where y <= -1). The overloads with a number x are kept with the others: one
    # lowering rule covers the three
    "aten.xlogy.Tensor": "its gradient through the decomposition is NaN at x = y = 0 and 0 for x at x = 0 (0 and "
                         "log(y) in eager)",
    "aten.xlogy.Scalar_Other": "its gradient through the decomposition for x at x = 0 is 0 (log(y) in eager)",
    "aten.xlogy.Scalar_Self": "kept with the other overloads of xlogy (one lowering rule)",
    "aten.special_xlog1py.default": "its gradient through the decomposition for x at x = 0 is 0 (log1p(y) in "
                                    "eager)",
    "aten.special_xlog1py.other_scalar": "its gradient through the decomposition for x at x = 0 is 0 (log1p(y) in "
                                         "eager)",
    "aten.special_xlog1py.self_scalar": "kept with the other overloads of xlog1py (one lowering rule)",
    # The same leak, of an inf or a 0/0 in the branch where does not take, at the points named: eager's own
    # derivative formulas are finite there (or NaN where the decomposition's is finite: logit outside [0, 1])
    "aten.celu.default": "its gradient through the decomposition is NaN for large x (exp overflows; 1 in eager)",
    "aten.mish.default": "its gradient through the decomposition is NaN for large x (1 in eager)",
    "aten.softplus.default": "its gradient through the decomposition is NaN for large beta * x (1 in eager)",
    "aten.sinc.default": "its gradient through the decomposition is NaN at 0 (0 in eager)",
    "aten.special_entr.default": "its gradient through the decomposition is NaN at 0 and inf (inf, -inf in eager)",
    "aten.logit.default": "its gradient through the decomposition is finite outside [0, 1] (NaN in eager)",
    # decomposed above autograd for traces (a Python Autograd kernel, set aside by `eager_derivatives`): its
    # where(x > l, x - l, where(x < -l, x + l, 0)) gives a NaN x the gradient 0, eager's passes the gradient on
    "aten.softshrink.default": "its gradient through the decomposition at NaN is 0 (passed through in eager)",
    # (y - 1) · max(log1p(-p), -100) - y · max(log(p), -100): at p = 0 or 1 (a float32 sigmoid saturates at 1
    # from 17 up) the clamped log's derivative is 0 · inf = NaN; eager's (p - y) / max(p(1 - p), 1e-12) is finite
    "aten.binary_cross_entropy.default": "its gradient through the decomposition is NaN at p = 0 and 1 (finite in "
                                         "eager)",
    # m + log(sum(exp(x - m))), m the row's max: the derivative autograd takes of it is g·exp(x - m)/s plus, at each
    # row's max, g - sum(g·exp(x - m)/s), zero in exact arithmetic but a rounding of g in float32 (3.4-5x eager's RMS
    # error on the gradient, measured); eager's logsumexp_backward is g·exp(x - lse)
    "aten.logsumexp.default": "its gradient through the decomposition adds a cancelling term at each max (3.4-5x "
                              "eager's error)",
    # sqrt(var(x)): where the std is 0 (a constant row) the derivative of sqrt is inf and the gradient 0 · inf = NaN;
    # eager's std_backward gives such a row the gradient 0. std_mean is std and mean (the same)
    "aten.std.correction": "its gradient through the decomposition is NaN where the std is 0 (0 in eager)",
    "aten.std_mean.correction": "its gradient through the decomposition is NaN where the std is 0 (0 in eager)",
}


# op name → why its decomposition would change what the graph means.
MEANING_KEPT: dict[str, str] = {
    # the core table makes `detach` an `aten.alias`, which reads the same data and says nothing about gradients:
    # capture then marks the result as requiring grad, and the joint trace sends the gradient through a value the
    # program detached (a distillation or EMA target, a stop-gradient factor). Kept, it stops the replay's autograd
    # as `.detach()` stops eager's; lowering and the partitioner treat it as the view it is
    "aten.detach.default": "decomposed to `aten.alias` it no longer stops the gradient",
}


# backward ops whose own derivative (eager's double backward) counts the statistics their forward saved (a norm's
# mean and inverse std, outputs autograd marks non-differentiable) as the functions of the input they are. A graph
# captured from a backward taken with create_graph=True (compiled autograd's) holds them with grad mode on, the
# statistics as plain inputs; decomposed there, the graph's derivative took them for constants (a gradient penalty
# through a layer norm gave the first layer's weights gradients 0.45 off eager's, silently). Capture keeps them
# whole there (`capture_decompositions`), and the joint trace differentiates them by eager's formula.
STATISTICS_BACKWARDS = (
    "aten.native_layer_norm_backward.default", "aten.native_group_norm_backward.default",
    "aten.native_batch_norm_backward.default", "aten._batch_norm_impl_index_backward.default",
    "aten.cudnn_batch_norm_backward.default", "aten.miopen_batch_norm_backward.default",
    "aten._fused_rms_norm_backward.default",
)


def _unless_differentiated(decomposition: Callable) -> Callable:
    def decompose(*args: Any, **kwargs: Any) -> Any:
        return NotImplemented if torch.is_grad_enabled() else decomposition(*args, **kwargs)

    return decompose


@functools.cache
def capture_decompositions() -> dict[Any, Callable]:
    """`decompositions()` for a capture: a backward op of `STATISTICS_BACKWARDS` run with grad mode on stays whole
    (its result may be differentiated again); the joint trace, with `decompositions()`, differentiates it by its
    formula and decomposes it beneath. Cached; do not mutate."""
    table = dict(decompositions())
    for op in map(resolve_op, STATISTICS_BACKWARDS):
        if op in table:
            table[op] = _unless_differentiated(table[op])
    return table


@functools.cache
def decompositions() -> dict[Any, Callable]:
    """torch's core ATen decompositions without those of random ops and those of `NUMERICALLY_KEPT` and
    `MEANING_KEPT`, and ember's own of the pointwise `_foreach_*` ops (see `foreach_decompositions`). Cached; do
    not mutate."""
    kept = {resolve_op(name) for name in (*NUMERICALLY_KEPT, *MEANING_KEPT)}
    table = {op: fn for op, fn in core_aten_decompositions().items() if not is_random(op) and op not in kept}
    return table | foreach_decompositions() | accurate_accumulation() | sign_bit_values()


def _softshrink_backward(grad_output: torch.Tensor, self: torch.Tensor, lambd: float) -> torch.Tensor:
    inside = torch.logical_and(self >= -lambd, self <= lambd)
    return torch.where(inside, 0, grad_output)  # NaN lies nowhere inside: its gradient passes


@functools.cache
def symbolic_backward_formulas() -> dict[Any, Callable]:
    """For a joint trace of symbolic sizes: ATen backward kernels of kept ops that torch has no decomposition of,
    as their formulas. ATen runs them as TensorIterator kernels, which fake tensors of symbolic sizes cannot run
    (the trace raised out of the compile: softshrink's). Only there: at NaN ATen's own kernel gives 0 in its vector
    lanes and passes the gradient in its scalar tail, and a static trace keeps the kernel, eager's very numbers."""
    return {torch.ops.aten.softshrink_backward.default: _softshrink_backward}


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _index_put_in_float(self: torch.Tensor, indices: Any, values: torch.Tensor, accumulate: bool = False) -> Any:
    if not accumulate or self.dtype not in _LOW_PRECISION:
        return NotImplemented
    summed = torch.ops.aten.index_put.default(self.float(), indices, values.float(), True)
    return summed.to(self.dtype)


@functools.cache
def sign_bit_values() -> dict[Any, Callable]:
    """The negated and conjugated views as the values they stand for (see the module's docstring)."""
    aten = torch.ops.aten
    return {aten._neg_view.default: aten.neg.default, aten._conj.default: aten.conj_physical.default}


@functools.cache
def accurate_accumulation() -> dict[Any, Callable]:
    """Decompositions that accumulate 16-bit floats in float32 (see the module's docstring)."""
    return {torch.ops.aten.index_put.default: _index_put_in_float}


# `_foreach_<name>` ops whose per-tensor op is `aten.<name>` with the same arguments, element by element.
FOREACH_POINTWISE = tuple("""
    abs acos add addcdiv addcmul asin atan ceil clamp_max clamp_min cos cosh div erf erfc exp expm1 floor frac lerp
    lgamma log log10 log1p log2 maximum minimum mul neg pow reciprocal round rsqrt sigmoid sign sin sinh sqrt sub tan
    tanh trunc
""".split())


@functools.cache
def foreach_decompositions() -> dict[Any, Callable]:
    """`aten._foreach_add.List(xs, ys, alpha=a)` → `[aten.add(x, y, alpha=a) for x, y in zip(xs, ys)]`, and so on
    for every functional overload of the pointwise foreach ops (what a compiled `optimizer.step()` calls with
    `foreach=True`): the per-tensor ops then fuse like any others. Overloads whose per-element scalars come as one
    tensor (`.Tensor` of addcmul/addcdiv: `scalars: Tensor`) are left whole."""
    table: dict[Any, Callable] = {}
    for name in FOREACH_POINTWISE:
        packet = getattr(torch.ops.aten, f"_foreach_{name}", None)
        per_tensor = getattr(torch.ops.aten, name, None)
        if packet is None or per_tensor is None:
            continue
        for overload_name in packet.overloads():
            overload = getattr(packet, overload_name)
            schema = overload._schema
            if schema.is_mutable or any(a.name == "scalars" and not isinstance(a.type, torch.ListType)
                                        for a in schema.arguments):
                continue
            table[overload] = functools.partial(_foreach, per_tensor, schema, _keyword_only(per_tensor))
    return table


def _keyword_only(packet: Any) -> frozenset[str]:
    """The names the per-tensor op takes only by keyword in some overload (`alpha` of add, `value` of addcmul)."""
    return frozenset(a.name for o in packet.overloads() for a in getattr(packet, o)._schema.arguments if a.kwarg_only)


def _foreach(per_tensor: Any, schema: Any, keyword: frozenset[str], *args: Any, **kwargs: Any) -> list:
    """Call `per_tensor` once per position of the list arguments, which are indexed; the others go to every call.
    The foreach op's arguments go in their order, by position, except those the per-tensor op takes by keyword
    (`_foreach_addcmul.Scalar(xs, as, bs, 0.5)` → `addcmul(x, a, b, value=0.5)`)."""
    bound = dict(zip((a.name for a in schema.arguments), args)) | kwargs
    names = [a.name for a in schema.arguments if a.name in bound]
    n = next(len(v) for v in bound.values() if isinstance(v, (list, tuple)))
    pick = lambda v, i: v[i] if isinstance(v, (list, tuple)) else v  # noqa: E731
    return [per_tensor(*(pick(bound[k], i) for k in names if k not in keyword),
                       **{k: pick(bound[k], i) for k in names if k in keyword}) for i in range(n)]
