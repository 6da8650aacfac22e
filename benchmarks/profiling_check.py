"""What the profiler check costs a compiled call that is not profiled: a generated wrapper as ember writes it
(first line: `if _profiling(): return <twin>(inputs)`) against the same wrapper without that line, on x * y + 1
over 1-element tensors (C++ codegen), taking turns in one process; and the check alone.

Usage: python benchmarks/profiling_check.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import time

import ember
import torch
from ember_core import load_function, profiler_active


def tiny(x, y):
    return x * y + 1


def per_call_ns(fns: dict, args, calls: int, repeats: int) -> dict[str, float]:
    """The least over repeats of the mean time per call (the run least disturbed by other processes: on a shared
    machine the noise is hundreds of ns, more than the check); the variants take turns."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter_ns()
            for _ in range(calls):
                fn(args)
            samples[name].append((time.perf_counter_ns() - start) / calls)
    return {name: min(s) for name, s in samples.items()}


def wrappers() -> tuple:
    """The compiled graph's wrapper, and the same source without the check, in a copy of its globals."""
    with ember.record_events() as ev:
        ember.compile(tiny)(torch.randn(1), torch.randn(1))
    [event] = ev.kinds("graph_compiled")
    compiled = event.payload.compiled
    wrapper = compiled.source.split("# ---- wrapper (Python) ----\n")[1]
    name = compiled.fn.__name__
    check = f"    if _profiling():\n        return {name}_profiled(inputs)\n"
    assert check in wrapper
    env = dict(compiled.fn.__globals__)
    unchecked = load_function(wrapper.replace(check, ""), env, name, "unchecked")
    return compiled.fn, unchecked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fast, unchecked = wrappers()
    inputs = [torch.randn(1), torch.randn(1)]
    for fn in (fast, unchecked):
        for _ in range(1000):
            fn(inputs)
    times = per_call_ns({"with the check": fast, "without": unchecked,
                         "the check alone": lambda _: profiler_active()}, inputs, args.calls, args.repeats)
    print(f"per-call time of the generated wrapper of x * y + 1 (1-element tensors, C++ codegen); best of "
          f"{args.repeats} x {args.calls} calls, 1 thread")
    for name, t in times.items():
        print(f"{name:20} {t:8.0f} ns")
    print(f"the check adds {times['with the check'] - times['without']:.0f} ns per call")


if __name__ == "__main__":
    main()
