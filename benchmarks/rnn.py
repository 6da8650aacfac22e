"""A training step of an LSTM and a GRU on data (the input needs no gradient, the weights do), handed to the
compiler whole (Dynamo's `allow_rnn`): ember vs eager vs torch.compile (Inductor), side by side.

Each variant runs in its own fresh process with fresh caches; the processes take turns (`--processes` rounds, the
order reversed every other round), and each reports the median over repeats of the mean step time and its first
step (the compile). The table gives the median over rounds. A variant that raises is reported with its error.
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


def measure(cell: str, variant: str, steps: int, repeats: int, threads: int) -> dict:
    _harness.use_fresh_caches()
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    torch._dynamo.config.allow_rnn = True
    kind = nn.LSTM if cell == "lstm" else nn.GRU
    model = kind(SHAPE["input"], SHAPE["hidden"], SHAPE["layers"])
    x = torch.randn(SHAPE["steps"], SHAPE["batch"], SHAPE["input"])
    if variant == "ember":
        import ember

        fn = ember.compile(model)
    elif variant == "inductor":
        fn = torch.compile(model, backend="inductor")
    else:
        fn = model

    def step() -> None:
        out, state = fn(x)
        h = state[0] if isinstance(state, tuple) else state
        (out.pow(2).mean() + h.sin().mean()).backward()

    try:
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
    except Exception as e:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
    step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        samples.append((time.perf_counter() - start) / steps * 1e3)
    return {"ms_per_step": statistics.median(samples), "first_s": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # internal: one measurement, as JSON
    args = parser.parse_args()
    if args.child:
        import json

        print(json.dumps(measure(*args.child, args.steps, args.repeats, args.threads)))
        return
    common = ["--steps", str(args.steps), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    print(f"training step (forward + backward, input without grad) of {SHAPE}, {args.threads} threads, "
          f"{_harness.machine()}; median of {args.processes} fresh processes x {args.repeats} repeats x "
          f"{args.steps} steps")
    print()
    print("| cell | eager ms | ember ms | inductor ms | ember vs eager | ember vs inductor | first step s (eager / "
          "ember / inductor) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for cell in CELLS:
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for round_ in range(args.processes):
            for variant in VARIANTS if round_ % 2 == 0 else tuple(reversed(VARIANTS)):
                runs[variant].append(_harness.run_child(__file__, [cell, variant, *common], timeout_s=1200))
        ms, first, errors = {}, {}, {}
        for v, rs in runs.items():
            if any("error" in r for r in rs):
                errors[v] = next(r["error"] for r in rs if "error" in r)
            else:
                ms[v] = statistics.median(r["ms_per_step"] for r in rs)
                first[v] = statistics.median(r["first_s"] for r in rs)
        cols = [f"{ms[v]:.2f}" if v in ms else "fails" for v in VARIANTS]
        firsts = " / ".join(f"{first[v]:.2f}" if v in first else "-" for v in VARIANTS)
        print(f"| {cell} | {' | '.join(cols)} | {_ratio(ms, 'ember', 'eager')} | {_ratio(ms, 'ember', 'inductor')} | "
              f"{firsts} |")
        for v, e in errors.items():
            print(f"\n{cell}, {v}: {e}")


def _ratio(ms: dict[str, float], a: str, b: str) -> str:
    """How many times faster `a` is than `b` (b's time over a's), or '-' where either failed."""
    return f"{ms[b] / ms[a]:.2f}x" if a in ms and b in ms else "-"


if __name__ == "__main__":
    main()
