"""Whole-tensor reductions (no i-dims: `x.sum()`, `(x*x).sum()`, `x.var()`): eager vs ember, median ms per call.

The variants take turns within every repeat; each number is the median over the repeats, and the fastest repeat
(on a shared machine the median moves with the neighbours' load, the fastest less). float32 inputs of 2^22 and
2^24 elements.

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
    print(f"threads={args.threads}  ms per call: median (fastest)")
    print(f"{'case':<14}{'n':>6}{'eager':>18}{'ember':>18}{'eager/ember':>13}")
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
            cells = [f"{ms[k]:.3f} ({min(times[k]) * 1e3:.3f})" for k in fns]
            print(f"{name:<14}{'2^' + str(log2):>6}{cells[0]:>18}{cells[1]:>18}{ms['eager'] / ms['ember']:>13.2f}")


if __name__ == "__main__":
    main()
