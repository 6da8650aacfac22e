"""Which layout a graph's convolutions run faster in, for pass `channels-last` (`channels_last.py`): timed on the
graph's device and kept on disk, or a rule where nothing can be timed.

`measured(convs)` runs the graph's convolutions (each distinct one as often as the graph has it, on random operands)
once NCHW and once NHWC and keeps the faster layout in ember's disk cache, once per set of convolutions, dtype and
device (the GPU model; on the CPU, the CPU and ATen's thread count). NHWC pays what the pass adds to a graph: the
conversion of the first convolution's input, and each weight's conversion (parameters stay NCHW: converted in the
forward, and again in the backward, which recomputes it). Where the graph trains (grad mode on, an operand that
requires grad) each convolution's `convolution_backward` is timed too, with the gradients the graph needs: on the
CPU, oneDNN's backward kernels decide (resnet18's run slower NHWC, mobilenetv3's depthwise ones faster).

The two devices start from opposite sides. On a GPU NHWC is the default (cuDNN's fast kernels are NHWC) and NCHW
must win by the `Tuner`'s margin; without a GPU to time on (compiling for CUDA on a machine without one), or where
the operands would take more than `MEASURE_BYTES`, the rule decides (`worth_channels_last`): NHWC unless depthwise
convolutions do most of the work. On the CPU NCHW is the default and NHWC must be `CPU_MARGIN` faster: the timing
leaves out the graph's other kernels, and reductions over a channels-last value's channels are slower than over an
NCHW one's; over `CPU_MEASURE_BYTES` the graph stays NCHW.
"""

from __future__ import annotations

import collections
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from ember_core import cpu_tag, to_dtype

from ..codegen import Tuner

PASS_ID = "channels-last"
FEW_CHANNELS = 8  # channels per group at and below which a grouped convolution counts as depthwise
MEASURE_BYTES = 4 << 30  # operands of a graph's convolutions (both layouts) up to which a GPU times the choice
CPU_MEASURE_BYTES = 1 << 30  # the same on the CPU, where timing is slower
CPU_MARGIN = 0.10  # how much faster NHWC's timing must be on the CPU
TUNER = Tuner("channels_last", PASS_ID, machine=("gpu",))
CPU_TUNER = Tuner("channels_last_cpu", PASS_ID, margin=CPU_MARGIN, machine=("cpu",))
NCHW, NHWC = (0,), (1,)


@dataclass(frozen=True)
class Conv:
    """A convolution's shape of work: its groups, channels per group in and out, and multiply-adds; and what it takes
    to run it again for `measured`: input and weight shapes, stride, padding, dilation, dtype, device, and the
    gradients its backward computes (input, weight, bias: none where the graph does not train)."""

    groups: int
    per_group_in: int
    per_group_out: int
    macs: int
    x: tuple[int, ...] = field(default=(), compare=False)
    w: tuple[int, ...] = field(default=(), compare=False)
    stride: tuple[int, ...] = field(default=(1, 1), compare=False)
    padding: tuple[int, ...] = field(default=(0, 0), compare=False)
    dilation: tuple[int, ...] = field(default=(1, 1), compare=False)
    dtype: str = field(default="float32", compare=False)
    device: str = field(default="cuda", compare=False)
    grads: tuple[bool, bool, bool] = field(default=(False, False, False), compare=False)


def worth_channels_last(convs: Sequence[Conv]) -> bool:
    """The GPU's rule: channels-last unless depthwise convolutions do most of the graph's convolution work."""
    total = sum(c.macs for c in convs)
    depthwise = sum(c.macs for c in convs if c.groups > 1 and c.per_group_in <= FEW_CHANNELS)
    return bool(convs) and depthwise * 2 <= total


def measured(convs: Sequence[Conv]) -> bool:
    """The faster layout for these convolutions, timed on their device once and kept on disk (see the module's
    docstring); a rule where nothing can time them."""
    device = torch.device(convs[0].device) if convs else torch.device("cpu")
    if device.type == "cpu":
        if _bytes(convs) > CPU_MEASURE_BYTES:
            return False
        return measure_layouts(convs, device, f"cpu {cpu_tag()}, {torch.get_num_threads()} threads")
    if device.type != "cuda" or not torch.cuda.is_available() or _bytes(convs) > MEASURE_BYTES:
        return worth_channels_last(convs)
    return measure_layouts(convs, device, torch.cuda.get_device_name(device))


def measure_layouts(convs: Sequence[Conv], device: torch.device, device_name: str) -> bool:
    """Are these convolutions faster NHWC than NCHW on `device` (named `device_name` in the disk cache's key)?"""
    counts = collections.Counter(_shape_key(c) for c in convs)
    key = hashlib.sha256(repr((sorted(counts.items()), device_name, torch.__version__)).encode()).hexdigest()[:40]
    if device.type == "cpu":
        tuner, candidates = CPU_TUNER, [NCHW, NHWC]
    else:  # the rule's choice wins ties
        tuner, candidates = TUNER, [NHWC, NCHW] if worth_channels_last(convs) else [NCHW, NHWC]
    stored = tuner.stored(key, candidates)
    if stored is not None:
        return stored == NHWC
    runs = {NCHW: _convolutions(counts, device, torch.contiguous_format),
            NHWC: _convolutions(counts, device, torch.channels_last)}
    first = convs[0]
    x0 = torch.randn(first.x, device=device, dtype=to_dtype(first.dtype))

    def launch(choice) -> None:
        if choice == NHWC:  # the conversion at the graph's edge
            x0.contiguous(memory_format=torch.channels_last)
        runs[choice]()

    for choice in candidates:  # once untimed: the libraries' first call of a shape sets it up
        launch(choice)
    training = " with backward" if any(any(c.grads) for c in convs) else ""
    choice = tuner.measure(key, f"channels-last: {len(convs)} convolutions {first.dtype}{training}", candidates,
                           launch, [], [x0])
    return choice == NHWC


def _shape_key(c: Conv) -> tuple:
    return (c.x, c.w, c.stride, c.padding, c.dilation, c.groups, c.dtype, c.grads)


def _bytes(convs: Sequence[Conv]) -> int:
    distinct = {_shape_key(c): c for c in convs}.values()
    size = sum(to_dtype(c.dtype).itemsize * (math.prod(c.x) + math.prod(c.w)) for c in distinct)
    return 2 * size


def _convolutions(counts: collections.Counter, device: torch.device, layout: torch.memory_format) -> Callable:
    """Each distinct convolution as often as the graph has it, on random operands in `layout` (the weight converted
    to it on each use, as the rewritten graph converts a parameter), and its backward where it has one."""
    work = []
    for (x, w, stride, padding, dilation, groups, dtype, grads), count in counts.items():
        dt = to_dtype(dtype)
        xt = torch.randn(x, device=device, dtype=dt).contiguous(memory_format=layout)
        wt = torch.randn(w, device=device, dtype=dt)
        out = torch.nn.functional.conv2d(xt, wt.contiguous(memory_format=layout), None, stride, padding, dilation,
                                         groups)
        gy = torch.randn_like(out) if any(grads) else None
        work.append((xt, wt, gy, stride, padding, dilation, groups, list(grads), count))

    def run() -> None:
        for xt, wt, gy, stride, padding, dilation, groups, grads, count in work:
            for _ in range(count):
                torch.nn.functional.conv2d(xt, wt.contiguous(memory_format=layout), None, stride, padding, dilation,
                                           groups)
                if gy is not None:
                    torch.ops.aten.convolution_backward(
                        gy, xt, wt.contiguous(memory_format=layout), [wt.shape[0]] if grads[2] else None, stride,
                        padding, dilation, False, [0, 0], groups, grads)

    return run
