"""Compiled autograd's per-backward overhead: the time of a training step (forward + backward) of a tiny MLP, with
and without compiled autograd, for ember and for torch.compile (Inductor), next to eager.

On a model this small the step time is nearly all per-call overhead; what compiled autograd adds is its cache
lookup at the start of each backward (the engine walks the autograd graph to build the key of the captured
backward it will run) minus what it saves by running one compiled backward instead of node after node.

Each variant runs in its own fresh process (the engine's cache of captured backwards is process-wide, so variants
must not share one); the processes take turns, `--processes` rounds, and each reports the median over repeats of the
mean step time. The table gives the median over rounds.
Usage: python benchmarks/compiled_autograd.py [--processes 3] [--steps 500] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

VARIANTS = ("eager", "ember", "ember + compiled autograd", "inductor", "inductor + compiled autograd")


def measure(variant: str, steps: int, repeats: int) -> dict[str, float]:
    import ember
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(4, 16)
    if variant.startswith("ember"):
        fn = ember.compile(model)
        context = ember.compiled_autograd.enable if "compiled" in variant else None
    elif variant.startswith("inductor"):
        fn = torch.compile(model, backend="inductor")

        def context():
            return torch._dynamo.compiled_autograd._enable(
                lambda gm: torch.compile(gm, backend="inductor", fullgraph=True))

        context = context if "compiled" in variant else None
    else:
        fn, context = model, None

    def step() -> None:
        fn(x).sum().backward()

    def run(n: int) -> None:
        if context is None:
            for _ in range(n):
                step()
        else:
            with context():
                for _ in range(n):
                    step()

    start = time.perf_counter()
    run(1)
    first = time.perf_counter() - start
    run(50)  # warm: .grad exists from here on, every capture is done
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(steps)
        samples.append((time.perf_counter() - start) / steps * 1e6)
    return {"us_per_step": statistics.median(samples), "first_s": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: one measurement, printed as JSON
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args.steps, args.repeats)))
        return
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for round_ in range(args.processes):
        order = VARIANTS if round_ % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            out = subprocess.run([sys.executable, __file__, "--variant", variant, "--steps", str(args.steps),
                                  "--repeats", str(args.repeats)], capture_output=True, text=True, check=True)
            results[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
    step = {v: statistics.median(r["us_per_step"] for r in rs) for v, rs in results.items()}
    first = {v: statistics.median(r["first_s"] for r in rs) for v, rs in results.items()}
    print(f"training step (forward + backward) of Linear(16,16)-Tanh-Linear(16,1) on a 4x16 batch, 1 thread; median "
          f"of {args.processes} fresh processes x {args.repeats} repeats x {args.steps} steps")
    print()
    print("| variant | us/step | x eager | first step s |")
    print("|---|---:|---:|---:|")
    for v in VARIANTS:
        print(f"| {v} | {step[v]:.1f} | {step[v] / step['eager']:.2f} | {first[v]:.2f} |")
    print()
    for name in ("ember", "inductor"):
        with_ca = step[f"{name} + compiled autograd"]
        print(f"compiled autograd adds {with_ca - step[name]:+.1f} us per step to {name} "
              f"({with_ca / step[name]:.2f}x)")


if __name__ == "__main__":
    main()
