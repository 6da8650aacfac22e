"""How far each compiler's training gradients are from float64's, per parameter, at each thread count.

The zoo's check compares a compiled model with eager float32, so it cannot say who is off when they disagree. This
runs one forward and backward of a zoo model in float64 (the reference), then eager, Inductor and ember in float32,
and prints each parameter's largest difference from the reference over its scale (its own largest value, and at
least a thousandth of the largest value of all gradients: a gradient that is zero in exact arithmetic is rounding
noise in every float32 run).

Usage: python benchmarks/grad_accuracy.py [--model mobilenetv3_small_100] [--threads 1,2] [--top 8]
"""

from __future__ import annotations

import argparse
import copy

import ember
import torch
import zoo


def gradients(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    model(x).pow(2).mean().backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenetv3_small_100")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, inputs, _ = zoo.BY_NAME[args.model].build()
    model.train(True)
    x = inputs[0]
    names = [n for n, _ in model.named_parameters()]
    reference = gradients(copy.deepcopy(model).double(), x.double())
    scale = max(float(r.abs().max()) for r in reference)
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        runs = {"eager": copy.deepcopy(model), "inductor": torch.compile(copy.deepcopy(model)),
                "ember": ember.compile(copy.deepcopy(model))}
        errors = {}
        for label, m in runs.items():
            errors[label] = [float((g.double() - r).abs().max()) / max(float(r.abs().max()), 1e-3 * scale)
                             for g, r in zip(gradients(m, x), reference, strict=True)]
        worst = sorted(range(len(names)), key=lambda i: -max(e[i] for e in errors.values()))[:args.top]
        print(f"\n{args.model}, {threads} thread(s): gradient error against float64 (largest of any compiler first)")
        print(f"| parameter | {' | '.join(runs)} |\n|---|{'---:|' * len(runs)}")
        for i in worst:
            print(f"| {names[i]} | {' | '.join(f'{errors[c][i]:.1e}' for c in runs)} |")
        print(f"| all (max) | {' | '.join(f'{max(errors[c]):.1e}' for c in runs)} |")


if __name__ == "__main__":
    main()
