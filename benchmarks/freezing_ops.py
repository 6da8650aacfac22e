"""Eager ATen conv / linear (+ activation) against oneDNN's fused and pre-packed ops, the candidates of freezing's
prepacking (`ember_runtime.freeze`). Run: `python benchmarks/freezing_ops.py [threads]` (default 2 threads)."""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F


def _time(fn, reps: int = 30) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _conv_cases():
    # (name, batch, cin, cout, hw, kernel, stride)
    return [("c64-56-k3", 1, 64, 64, 56, 3, 1), ("c128-28-k3", 1, 128, 128, 28, 3, 1),
            ("c256-14-k3", 1, 256, 256, 14, 3, 1), ("c64-56-k1", 1, 64, 256, 56, 1, 1),
            ("stem-224-k7", 1, 3, 64, 224, 7, 2), ("c64-56-k3-b8", 8, 64, 64, 56, 3, 1)]


def conv_row(name: str, n: int, cin: int, cout: int, hw: int, k: int, s: int) -> str:
    x = torch.randn(n, cin, hw, hw)
    w, b = torch.randn(cout, cin, k, k), torch.randn(cout)
    pad, st, dil = [k // 2] * 2, [s] * 2, [1, 1]
    packed = torch.ops.mkldnn._reorder_convolution_weight(w, pad, st, dil, 1, list(x.shape))
    xcl = x.contiguous(memory_format=torch.channels_last)
    fused_op = torch.ops.mkldnn._convolution_pointwise
    eager = _time(lambda: torch.relu(F.conv2d(x, w, b, st, pad)))
    fused = _time(lambda: fused_op(x, w, b, pad, st, dil, 1, "relu", [], None))
    packed_t = _time(lambda: fused_op(x, packed, b, pad, st, dil, 1, "relu", [], None))
    packed_cl = _time(lambda: fused_op(xcl, packed, b, pad, st, dil, 1, "relu", [], None))
    return f"| conv+relu {name} | {eager:.3f} | {fused:.3f} | {packed_t:.3f} | {packed_cl:.3f} |"


def linear_row(m: int, k: int, n: int) -> str:
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
    eager = _time(lambda: F.gelu(F.linear(x, w, b)))
    fused = _time(lambda: torch.ops.mkldnn._linear_pointwise(x, w, b, "gelu", [], "none"))
    fused_packed = _time(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "gelu", [], "none"))
    mkl = _time(lambda: F.gelu(torch.ops.mkl._mkl_linear(x, mkl_w, w, b, m)))
    return (f"| linear+gelu {m}x{k}x{n} | {eager:.3f} | {fused:.3f} | {fused_packed:.3f} "
            f"| mkl packed + gelu: {mkl:.3f} |")


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    onednn = torch.backends.mkldnn.is_available()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, oneDNN {onednn}")
    print("| case (ms, median) | eager ATen | mkldnn fused, plain weight | fused, packed weight "
          "| packed, channels_last x |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for case in _conv_cases():
            print(conv_row(*case), flush=True)
        for m, k, n in [(1, 512, 1000), (8, 768, 3072), (64, 768, 3072), (256, 1024, 1024)]:
            print(linear_row(m, k, n), flush=True)


if __name__ == "__main__":
    main()
