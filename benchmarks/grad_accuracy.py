"""How far each compiler's training gradients are from float64's, per parameter, at each thread count.

The zoo's check compares a compiled model with eager float32, so it cannot say who is off when they disagree. This
trains a zoo model a few SGD steps in float64 (the reference), eagerly in float32, with Inductor and with ember,
and prints each parameter's RMS gradient error against the reference, with the accuracy contract's ratio: the
compiled error over eager's, each raised to the gradient's floor (a gradient zero in exact arithmetic counts at
float32's noise, one where eager lands under its own error level on the model at that level). tests/
test_grad_accuracy.py asserts the same measurement (`ember_core.testing.gradient_errors`) at 3x for models.py's
models. Each step starts from the float64 run's parameters (`--drift` lets the float32 runs train on their own:
two trainings a rounding apart then cross ReLU kinks differently, which says nothing about arithmetic).

Usage: python benchmarks/grad_accuracy.py [--model mobilenetv3_small_100] [--threads 1,2] [--steps 2] [--top 8]
                                          [--drift]
"""

from __future__ import annotations

import argparse

import ember
import torch
import zoo
from ember_core.testing import gradient_errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenetv3_small_100")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--drift", action="store_true", help="the float32 runs do not follow the reference")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, inputs, _ = zoo.BY_NAME[args.model].build()
    model.train(True)
    threads = [int(t) for t in args.threads.split(",")]
    results = {}
    for label, compile_fn in {"inductor": torch.compile, "ember": ember.compile}.items():
        torch._dynamo.reset()
        results[label] = gradient_errors(model, [inputs[0]], compile_fn, steps=args.steps, threads=threads,
                                         follow_reference=not args.drift)
    for count in threads:
        print_table(args.model, count, {k: [e for e in v if e.threads == count] for k, v in results.items()},
                    args.top)


def print_table(model: str, threads: int, results: dict, top: int) -> None:
    """The `top` gradients by their worst ratio over the compilers, then each compiler's worst."""
    labels = list(results)
    rows = list(zip(*results.values()))  # each row: one (parameter, step), a GradError per compiler
    rows.sort(key=lambda row: -max(e.ratio for e in row))
    print(f"\n{model}, {threads} thread(s): RMS gradient error against float64 (ratio to eager's in brackets)")
    print(f"| parameter | step | eager | {' | '.join(labels)} |\n|---|---:|---:|{'---:|' * len(labels)}")
    for row in rows[:top]:
        cells = " | ".join(f"{e.compiled:.1e} ({e.ratio:.1f}x)" for e in row)
        print(f"| {row[0].name} | {row[0].step} | {row[0].eager:.1e} | {cells} |")
    worst = " | ".join(f"{max(e.ratio for e in results[label]):.1f}x" for label in labels)
    print(f"| all (worst ratio) | | | {worst} |")


if __name__ == "__main__":
    main()
