"""Lowering rule of 2-d max pooling with its indices (`max_pool2d_with_indices`) over small windows: one pointwise
kernel over the output, each window position (a tap) a masked load, unrolled.

ATen's CPU kernel for an NCHW input scans each window in scalar code: resnet18's first pooling (1x64x112x112,
3x3, stride 2, padding 1) took 2.3 ms on 2 threads of a Zen 5, and 0.14 ms on the same tensor in NHWC. A window
is too short for a reduction kernel (lanes set up and merged per output point), so the taps are unrolled in a
kernel whose lanes are output points. Windows of more than `MAX_TAPS` positions, and inputs whose rows are not
contiguous (NHWC, where ATen's kernel is vectorized over channels and 4x faster than this one), stay ATen calls.

Eager's results exactly, by eager's own loop: the running max starts at -inf with the index of the window's first
position inside the input, and a tap replaces both where it is larger or NaN. So ties keep the first position,
a window with NaNs gives the last NaN's index, and a window of -inf only its first position inside the input;
taps in the padding read -inf and never replace anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember_core import Node

from ._context import LoweringContext, TensorRef
from ._errors import Unsupported
from ._loop_ir import FLOAT_DTYPES, opmath

MAX_TAPS = 25  # window positions up to which the taps are unrolled (5x5)


def _pair(value: Any, name: str, default: tuple[int, int] | None = None) -> tuple[int, int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values and default is not None:
        return default
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise Unsupported(f"max_pool2d_with_indices with a {name} other than two static ints: {value!r}")
    return values[0], values[1]


def _max_pool2d_with_indices(ctx: LoweringContext, node: Node, a: dict) -> list[TensorRef]:
    x = ctx.tensor(a["self"])
    if x.rank not in (3, 4) or x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"max_pool2d_with_indices of a {x.rank}-d {x.dtype} tensor")
    kernel = _pair(a["kernel_size"], "kernel size")
    stride = _pair(a["stride"], "stride", default=kernel)
    padding = _pair(a["padding"], "padding")
    dilation = _pair(a["dilation"], "dilation")
    if kernel[0] * kernel[1] > MAX_TAPS:
        raise Unsupported(f"max_pool2d_with_indices over a {kernel[0]}x{kernel[1]} window (over {MAX_TAPS} taps)")
    layout = ctx.strided_layout(x)
    if layout is None or layout[0][-1] != 1:
        raise Unsupported("max_pool2d_with_indices of a tensor whose rows are not contiguous (ATen's channels-last "
                          "kernel, vectorized over channels, is faster)")
    out_shape = ctx.shape_of(node.outputs[0])
    height, width = x.shape[-2:]
    acc = opmath(x.dtype)
    dims, idx = ctx.dims_for(out_shape)
    b = ctx.builder(dims)
    *lead, ho, wo = idx
    top, left = ho * stride[0] - padding[0], wo * stride[1] - padding[1]
    row_width = b.index(width)
    best_index = _first_inside(b, top, dilation[0]) * row_width + _first_inside(b, left, dilation[1])
    best = b.const(float("-inf"), acc)
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            at_h, at_w = top + kh * dilation[0], left + kw * dilation[1]
            h, w = b.index(at_h), b.index(at_w)
            inside = b.and_(b.and_(h.ge(0), h.lt(b.index(height))), b.and_(w.ge(0), w.lt(row_width)))
            v = b.cast(ctx.load(b, x, [*lead, at_h, at_w], mask=inside, other=float("-inf")), acc)
            take = b.or_(v.gt(best), b.isnan(v))
            best, best_index = b.where(take, v, best), b.where(take, h * row_width + w, best_index)
    refs = []
    for result, dtype in ((best, x.dtype), (best_index, "int64")):
        out = ctx.new_buffer(out_shape, dtype)
        b.store(out, idx, b.cast(result, dtype, implicit=dtype == x.dtype))
        refs.append(ctx.identity(out))
    ctx.add_kernel(b)
    return refs


def _first_inside(b, start, dilation: int):
    """The first position `start + k * dilation` (k >= 0) that is not below 0, as an index value."""
    s = b.index(start)
    if dilation == 1:
        return b.where(s.ge(0), s, b.const(0, "int64"))
    return b.where(s.ge(0), s, s + (-s + (dilation - 1)) // dilation * dilation)


pool_rules: dict[str, Callable] = {"aten.max_pool2d_with_indices.default": _max_pool2d_with_indices}
