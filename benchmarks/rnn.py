"""A training step of an LSTM and a GRU on data (the input needs no gradient, the weights do), handed to the
compiler whole (Dynamo's `allow_rnn`): ember vs eager vs torch.compile (Inductor), side by side.

Each process (`--processes`, fresh, with fresh caches) builds the three variants of one cell from the same weights,
takes each one's first step (the compile; eager, ember, then Inductor) and then times them in turns: `--repeats`
rounds, each of `--steps` steps of every variant, the order rotated every round, so a slow spell of the machine
weighs on all three alike. A process reports each variant's median over rounds; the table gives the median over
processes of the times and of the per-process ratios. A variant that raises is reported with its error.
Usage: python benchmarks/rnn.py [--processes 3] [--steps 20] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness  # noqa: E402

VARIANTS = ("eager", "ember", "inductor")
CELLS = ("lstm", "gru")
SHAPE = dict(input=64, hidden=128, layers=2, steps=32, batch=16)


def measure(cell: str, steps: int, repeats: int, threads: int) -> dict:
    """One process: each variant's first step (s) and median ms per step over rounds timed in turns, or its error."""
    _harness.use_fresh_caches()
    import copy

    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    torch._dynamo.config.allow_rnn = True
    kind = nn.LSTM if cell == "lstm" else nn.GRU
    model = kind(SHAPE["input"], SHAPE["hidden"], SHAPE["layers"])
    x = torch.randn(SHAPE["steps"], SHAPE["batch"], SHAPE["input"])

    def stepper(fn):
        def step() -> None:
            out, state = fn(x)
            h = state[0] if isinstance(state, tuple) else state
            (out.pow(2).mean() + h.sin().mean()).backward()
        return step

    result: dict[str, dict] = {}
    steps_of = {}
    for variant in VARIANTS:
        m = copy.deepcopy(model)
        if variant == "ember":
            import ember

            fn = ember.compile(m)
        elif variant == "inductor":
            fn = torch.compile(m, backend="inductor")
        else:
            fn = m
        step = stepper(fn)
        try:
            start = time.perf_counter()
            step()
            result[variant] = {"first_s": time.perf_counter() - start}
            step()
        except Exception as e:  # noqa: BLE001 - reported in the table
            result[variant] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
            continue
        steps_of[variant] = step
    samples: dict[str, list[float]] = {v: [] for v in steps_of}
    order = list(steps_of)
    for round_ in range(repeats):
        for variant in order[round_ % len(order):] + order[:round_ % len(order)]:
            start = time.perf_counter()
            for _ in range(steps):
                steps_of[variant]()
            samples[variant].append((time.perf_counter() - start) / steps * 1e3)
    for variant, ms in samples.items():
        result[variant]["ms_per_step"] = statistics.median(ms)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one process's measurement, as JSON
    args = parser.parse_args()
    if args.child:
        import json

        print(json.dumps(measure(args.child, args.steps, args.repeats, args.threads)))
        return
    common = ["--steps", str(args.steps), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    print(f"training step (forward + backward, input without grad) of {SHAPE}, {args.threads} threads, "
          f"{_harness.machine()}; median of {args.processes} fresh processes, each timing the variants in turns "
          f"({args.repeats} rounds of {args.steps} steps)")
    print()
    print("| cell | eager ms | ember ms | inductor ms | ember vs eager | ember vs inductor | first step s (eager / "
          "ember / inductor) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for cell in CELLS:
        runs = [_harness.run_child(__file__, [cell, *common], timeout_s=1800) for _ in range(args.processes)]
        ms, first, errors = {}, {}, {}
        for v in VARIANTS:
            if any("error" in r[v] for r in runs):
                errors[v] = next(r[v]["error"] for r in runs if "error" in r[v])
            else:
                ms[v] = statistics.median(r[v]["ms_per_step"] for r in runs)
                first[v] = statistics.median(r[v]["first_s"] for r in runs)
        cols = [f"{ms[v]:.2f}" if v in ms else "fails" for v in VARIANTS]
        firsts = " / ".join(f"{first[v]:.2f}" if v in first else "-" for v in VARIANTS)
        print(f"| {cell} | {' | '.join(cols)} | {_ratio(runs, 'ember', 'eager')} | "
              f"{_ratio(runs, 'ember', 'inductor')} | {firsts} |")
        for v, e in errors.items():
            print(f"\n{cell}, {v}: {e}")


def _ratio(runs: list[dict], a: str, b: str) -> str:
    """How many times faster `a` is than `b` (b's time over a's, the median over processes of each process's
    ratio), or '-' where either failed."""
    ratios = [r[b]["ms_per_step"] / r[a]["ms_per_step"] for r in runs
              if "ms_per_step" in r.get(a, {}) and "ms_per_step" in r.get(b, {})]
    return f"{statistics.median(ratios):.2f}x" if len(ratios) == len(runs) else "-"


if __name__ == "__main__":
    main()
