"""Per-call overhead of a tiny function on 1-element tensors: eager, torch.compile (Inductor), ember per frontend.

All variants run side by side in one process; each number is the median over repeats of the mean time per call.
Usage: python benchmarks/overhead.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time

import ember
import torch


def tiny(x, y):
    return x * y + 1


def per_call_us(fn, args, calls: int, repeats: int) -> float:
    for _ in range(200):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    inputs = (torch.randn(1), torch.randn(1))
    variants = {
        "eager": tiny,
        "torch.compile (inductor)": torch.compile(tiny, backend="inductor"),
        "ember (dynamo frontend)": ember.compile(tiny),
        "ember (trace frontend)": ember.compile(tiny, options={"frontend": "trace"}),
    }
    compile_s = {}
    for name, fn in variants.items():
        start = time.perf_counter()
        fn(*inputs)
        compile_s[name] = time.perf_counter() - start
    with torch.no_grad():
        times = {name: per_call_us(fn, inputs, args.calls, args.repeats) for name, fn in variants.items()}
    eager, inductor = times["eager"], times["torch.compile (inductor)"]
    print(f"per-call time of x * y + 1 on 1-element tensors; median of {args.repeats} x {args.calls} calls, 1 thread")
    print(f"{'variant':28} {'us/call':>9} {'x eager':>8} {'x inductor':>11} {'first call s':>13}")
    for name, t in times.items():
        print(f"{name:28} {t:9.2f} {t / eager:8.2f} {t / inductor:11.2f} {compile_s[name]:13.3f}")
    print(f"added over eager: inductor {inductor - eager:.2f} us, "
          + ", ".join(f"{n.split('(')[1][:-1]} {times[n] - eager:.2f} us" for n in times if n.startswith("ember")))


if __name__ == "__main__":
    main()
