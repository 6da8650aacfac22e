"""`python -m tests.training_fuzz run --seeds A:B [options]`: check the programs of seeds A to B-1 (see
`tests/training_fuzz`); `--show` prints them instead. Exits 1 when a seed has a finding."""

from __future__ import annotations

import argparse
import sys
import time

from .judge import Setting, check
from .programs import generate, with_edges, with_floats


def _seeds(text: str) -> range:
    start, _, stop = text.partition(":")
    return range(int(start), int(stop) if stop else int(start) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.training_fuzz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="check the programs of some seeds")
    run.add_argument("--seeds", type=_seeds, default=range(0, 100), help="A:B, the seeds A to B-1 (default 0:100)")
    run.add_argument("--frontend", default="dynamo", choices=("dynamo", "trace"))
    run.add_argument("--codegen", default="cpp", choices=("cpp", "interpreter"), help="the CPU codegen")
    run.add_argument("--dynamic", action="store_true", help="dynamic=True, and a second batch size")
    run.add_argument("--autocast", action="store_true", help="eager and ember under CPU autocast to bfloat16")
    run.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="the module's and inputs'")
    run.add_argument("--inference", action="store_true", help="under no_grad: loss, output and buffers only")
    run.add_argument("--steps", type=int, default=1, help="training steps, SGD between them (each compared)")
    run.add_argument("--compiled-autograd", action="store_true",
                     help="ember's backward captured whole at run time (ember.compiled_autograd)")
    run.add_argument("--floats", action="store_true",
                     help="steps that read a float argument, which changes every training step (3 steps at least)")
    run.add_argument("--edges", action="store_true",
                     help="steps that give ops int arguments at the edges of their ranges (from the end, past it)")
    run.add_argument("--show", action="store_true", help="print the programs, check nothing")
    run.add_argument("--verbose", action="store_true", help="say which graphs ran eagerly (fallback events)")
    args = parser.parse_args(argv)

    setting = Setting(args.frontend, args.codegen, args.dynamic, args.autocast, args.dtype, args.inference,
                      args.steps, args.compiled_autograd, args.floats, args.edges)
    bad, fell_back, start = 0, 0, time.monotonic()
    for seed in args.seeds:
        program = generate(seed)
        shown = with_floats(program) if args.floats else program
        shown = with_edges(shown) if args.edges else shown
        if args.show:
            print(shown)
            continue
        verdict = check(program, setting)
        fell_back += bool(verdict.fallbacks)
        if verdict.findings:
            bad += 1
            print("\n".join(map(str, verdict.findings)) + "\n" + str(shown), flush=True)
        if args.verbose and verdict.fallbacks:
            print(f"seed {seed}: fell back: " + "; ".join(sorted(set(verdict.fallbacks))), flush=True)
    if not args.show:
        print(f"{len(args.seeds)} program(s), {bad} with findings, {fell_back} with a graph run eagerly ({setting}; "
              f"{time.monotonic() - start:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
