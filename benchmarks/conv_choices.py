"""Every 2-d convolution of a zoo model, timed as ATen runs it and as freezing's oneDNN rewrite would.

For each `nn.Conv2d` (its input shape recorded by a forward hook) this times, at the given thread count:
ATen's `conv2d` on NCHW input and on channels-last input, and `mkldnn._convolution_pointwise` with the weight
pre-packed (`prepack-weights`) on channels-last and on NCHW input. Medians of 5 repeats of 50 calls, microseconds.
It is what a per-convolution choice at freeze time would measure; at 1 thread mobilenetv3's 1x1 convolutions run
faster in ATen, at 2 threads pre-packed.

Usage: python benchmarks/conv_choices.py [--model mobilenetv3_small_100] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import zoo


def micros(fn, calls: int = 50, repeats: int = 5) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e6


def time_conv(m: torch.nn.Conv2d, shape: torch.Size) -> list[float]:
    """ATen NCHW, ATen channels-last, pre-packed channels-last, pre-packed NCHW: microseconds per call."""
    x = torch.randn(shape)
    xcl = x.contiguous(memory_format=torch.channels_last)
    w = m.weight.detach().contiguous()
    b = m.bias.detach() if m.bias is not None else torch.zeros(m.out_channels)
    s, p, d, g = list(m.stride), list(m.padding), list(m.dilation), m.groups
    packed = torch.ops.mkldnn._reorder_convolution_weight(w, p, s, d, g, list(shape))

    def fused(inp: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._convolution_pointwise(inp, packed, b, p, s, d, g, "none", [], None)
    return [micros(lambda: torch.conv2d(x, w, b, s, p, d, g)), micros(lambda: torch.conv2d(xcl, w, b, s, p, d, g)),
            micros(lambda: fused(xcl)), micros(lambda: fused(x))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenetv3_small_100")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, inputs, _ = zoo.BY_NAME[args.model].build()
    model.eval()
    seen: list[tuple[torch.nn.Conv2d, torch.Size]] = []
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(lambda mod, i, o: seen.append((mod, i[0].shape)))
    with torch.no_grad():
        model(*inputs)
    print(f"{args.model}, {args.threads} thread(s), microseconds per call")
    print("| input | conv | aten nchw | aten channels-last | packed channels-last | packed nchw |")
    print("|---|---|---:|---:|---:|---:|")
    totals = [0.0] * 4
    with torch.no_grad():
        for m, shape in seen:
            row = time_conv(m, shape)
            totals = [t + r for t, r in zip(totals, row)]
            conv = f"{m.in_channels}->{m.out_channels} k{m.kernel_size[0]} s{m.stride[0]} g{m.groups}"
            print(f"| {tuple(shape)} | {conv} | " + " | ".join(f"{r:.0f}" for r in row) + " |")
    print("| all | | " + " | ".join(f"{t:.0f}" for t in totals) + " |")


if __name__ == "__main__":
    main()
