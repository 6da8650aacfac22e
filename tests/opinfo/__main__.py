"""`python -m tests.opinfo run|report|worker`: the sweep's command line (run it from the repository root)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import cases, expected, report, sweep


def _list(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.opinfo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run shards of op_db and write their results and the summary")
    run.add_argument("--shard", default="0/1", help="K/N: every N-th op from the K-th (default 0/1, all ops)")
    run.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or several, comma-separated")
    run.add_argument("--phases", default="forward,backward")
    run.add_argument("--ops", default="", help="only these op keys (name or name.variant), comma-separated")
    run.add_argument("--compiler", default="ember", choices=cases.COMPILERS,
                     help="inductor and eager are references: they check the harness and the list, never ember")
    run.add_argument("--samples", type=int, default=cases.SAMPLES, help="samples per op")
    run.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                     help="where samples are made and run (default cpu); results of cuda go to OUT/cuda by default")
    run.add_argument("--grid", type=float, default=0.0,
                     help="round float inputs to multiples of this (0.5, 1: ties, zeros and met margins, where "
                          "gradients through decompositions go wrong); give it its own --out, and judge its "
                          "failures by hand: the expected list is the plain sweep's")
    run.add_argument("--layout", default="", choices=cases.LAYOUTS,
                     help="give every input this layout, the same values in other memory (noncontiguous: strides "
                          "doubled and an offset; transposed: column-major); its own --out, failures judged by hand")
    run.add_argument("--dynamic", action="store_true",
                     help="compile each op once with dynamic=True for all its samples, so a graph of symbolic "
                          "sizes made from one sample runs the next ones; its own --out, failures judged by hand")
    run.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    run.add_argument("--chunk", type=int, default=sweep.CHUNK, help="ops per worker process (default %(default)s)")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds one sample may take")
    for p in (run, sub.add_parser("report", help="summarize every result file in --out")):
        p.add_argument("--out", type=Path, default=None, help="folder of result files (default opinfo-results)")
        p.add_argument("--markdown", type=Path, help="where the summary goes (default OUT/SUMMARY-<compiler>.md)")
        p.add_argument("--expected", type=Path, default=expected.PATH, help="the expected-failures list")
        p.add_argument("--update-expected", action="store_true",
                       help="rewrite the list with what the cases that ran did (ember only)")
    sub.choices["report"].add_argument("--compiler", default="ember", choices=cases.COMPILERS)
    sub.choices["report"].add_argument("--note", action="append", default=[],
                                       help="a paragraph for the summary's head (how long the run took, where)")
    work = sub.add_parser("worker", help="internal: run one job of the driver")
    work.add_argument("job")
    args = parser.parse_args(argv)

    if args.command == "worker":
        return sweep.worker_main(args.job)
    cases.DEVICE = getattr(args, "device", "cpu")
    if args.out is None:
        args.out = sweep.ROOT / "opinfo-results" / ("" if cases.DEVICE == "cpu" else cases.DEVICE)
    if args.command == "run":
        shard, start = sweep.parse_shard(args.shard), time.monotonic()
        ran: list[cases.CaseResult] = []
        for dtype in _list(args.dtype):
            if dtype not in cases.DTYPES:
                parser.error(f"--dtype: {dtype!r} is not one of {', '.join(cases.DTYPES)}")
            keys = sweep.shard_ops(dtype, shard, _list(args.ops))
            name = sweep.result_name(args.compiler, dtype, shard)
            print(f"{name}: {len(keys)} ops, {args.jobs} worker(s)", flush=True)
            ran += sweep.run_shard(keys, dtype, _list(args.phases), args.compiler, args.samples, args.jobs,
                                   args.timeout, args.out / name, args.out / (name[:-6] + ".log"), cases.DEVICE,
                                   args.chunk, args.grid, args.layout, args.dynamic)
        print(f"ran {len(ran)} cases in {time.monotonic() - start:.0f} s", flush=True)
    return summarize(args, ran if args.command == "run" else None)


def summarize(args: argparse.Namespace, ran: list[cases.CaseResult] | None) -> int:
    """Write the summary of every result file of the compiler; judge the cases that ran (all, for `report`)."""
    files = sorted(args.out.glob(f"{args.compiler}-*-shard-*.jsonl"))
    everything = sweep.load_results(files)
    judged = everything if ran is None else ran
    listed = expected.load(args.expected)
    verdict = expected.check(judged, listed) if args.compiler == "ember" else None
    markdown = args.markdown or args.out / f"SUMMARY-{args.compiler}.md"
    markdown.parent.mkdir(parents=True, exist_ok=True)
    notes = [*getattr(args, "note", []), "",
             f"From {len(files)} result files in {args.out.name}/: {', '.join(f.name for f in files)}."]
    markdown.write_text(report.render(everything, verdict, notes=notes))
    print(f"summary: {markdown}")
    if args.update_expected and args.compiler == "ember":
        args.expected.write_text(expected.render(expected.updated(listed, judged)))
        print(f"updated {args.expected}")
        return 0
    if verdict is None:
        return 0
    for line in verdict.lines():
        print(line)
    print(f"{len(verdict.unexpected_failures)} unexpected failures, {len(verdict.unexpected_passes)} unexpected passes")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
