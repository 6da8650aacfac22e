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


def per_call_us(variants: dict, args, calls: int, repeats: int) -> dict[str, float]:
    """Median over repeats of the mean time per call; the variants take turns within each repeat, so a noisy
    neighbour slows them all alike."""
    for fn in variants.values():
        for _ in range(200):
            fn(*args)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


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
        "torch.compile (inductor, reduce-overhead)": torch.compile(tiny, backend="inductor", mode="reduce-overhead"),
        "torch.compile (backend=eager)": torch.compile(tiny, backend="eager"),
        "ember (dynamo frontend)": ember.compile(tiny),
        "ember (trace frontend)": ember.compile(tiny, options={"frontend": "trace"}),
        "ember (dynamo, reduce-overhead)": ember.compile(tiny, mode="reduce-overhead"),
        "ember (trace, reduce-overhead)": ember.compile(tiny, mode="reduce-overhead", options={"frontend": "trace"}),
    }
    compile_s = {}
    for name, fn in variants.items():
        start = time.perf_counter()
        fn(*inputs)
        compile_s[name] = time.perf_counter() - start
    with torch.no_grad():
        times = per_call_us(variants, inputs, args.calls, args.repeats)
    eager, inductor = times["eager"], times["torch.compile (inductor)"]
    print(f"per-call time of x * y + 1 on 1-element tensors; median of {args.repeats} x {args.calls} calls, 1 thread")
    print(f"{'variant':42} {'us/call':>9} {'x eager':>8} {'x inductor':>11} {'first call s':>13}")
    for name, t in times.items():
        print(f"{name:42} {t:9.2f} {t / eager:8.2f} {t / inductor:11.2f} {compile_s[name]:13.3f}")
    print(f"added over eager: inductor {inductor - eager:.2f} us, "
          + ", ".join(f"ember {n.split('(')[1][:-1]} {times[n] - eager:.2f} us"
                      for n in times if n.startswith("ember")))
    floor = times["torch.compile (backend=eager)"]
    print(f"Dynamo alone (backend=eager) adds {floor - eager:.2f} us; ember's layers on top of Dynamo add "
          f"{times['ember (dynamo frontend)'] - floor:.2f} us")


if __name__ == "__main__":
    main()
