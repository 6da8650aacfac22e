"""Whole-tensor reductions (no i-dims: `x.sum()`, `(x*x).sum()`, `x.var()`): eager vs ember, median ms per call.

The variants take turns within every repeat; each number is the median over the repeats. float32 inputs of 2^22
and 2^24 elements.

Usage: python benchmarks/whole_reductions.py [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import ember
import torch

CASES = {"x.sum()": lambda x: x.sum(), "(x*x).sum()": lambda x: (x * x).sum(), "x.var()": lambda x: x.var()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads}  median ms per call")
    print(f"{'case':<14}{'n':>6}{'eager':>9}{'ember':>9}{'eager/ember':>13}")
    for log2 in (22, 24):
        x = torch.randn(1 << log2)
        for name, fn in CASES.items():
            fns = {"eager": fn, "ember": ember.compile(fn, dynamic=False)}
            torch.testing.assert_close(fns["ember"](x), fn(x), rtol=1e-4, atol=1e-4)
            times: dict[str, list[float]] = {k: [] for k in fns}
            for _ in range(args.repeats):
                for k, f in fns.items():
                    start = time.perf_counter()
                    f(x)
                    times[k].append(time.perf_counter() - start)
            ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f"{name:<14}{'2^' + str(log2):>6}{ms['eager']:>9.3f}{ms['ember']:>9.3f}"
                  f"{ms['eager'] / ms['ember']:>13.2f}")


if __name__ == "__main__":
    main()
