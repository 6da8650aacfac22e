"""Warm start: how long a fresh process compiles a model on an empty cache (cold) and on the cache an earlier
process left (warm), ember and Inductor side by side.

Every measurement is one fresh child process. It points ember's `EMBER_CACHE_DIR` and Inductor's
`TORCHINDUCTOR_CACHE_DIR` into the folder it is given (before torch is imported), compiles a tiny model with the
same compiler in the same mode (so that imports and one-time start-up are not counted), collects garbage (the
first full collection of the objects start-up made would otherwise land inside the timed call in some children
and not in others: a gen-2 collection takes 0.15 s here), then calls the workload once and a few times more:
compile time = the first call minus the median of the steady calls. A cold child gets a
fresh folder; the warm child after it gets the same folder, now holding what the cold one stored (ember: its
partitions, kernel plans and built libraries; Inductor: its FX graph and AOTAutograd caches, on by default). Rows
are medians over `--repeats` such pairs. "Dynamo alone" is `torch.compile(backend="eager")`: Dynamo's tracing
and guards with no compiler behind it, the part of a warm compile neither cache removes.

Usage: python benchmarks/warm_start.py [--repeats 3] [--only NAME,...] [--write]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if "--child" in sys.argv:  # the caches live where the parent says: set before torch and ember read them
    _FOLDER = sys.argv[sys.argv.index("--child") + 3]
    os.environ["EMBER_CACHE_DIR"] = os.path.join(_FOLDER, "ember")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_FOLDER, "inductor")

import torch  # noqa: E402
from _harness import write_section  # noqa: E402
from models import Block, GeluMLP, SmallCNN, mlp_train_step_model  # noqa: E402
from torch import nn  # noqa: E402


@dataclass
class Workload:
    name: str
    make: Callable[[], tuple[nn.Module, torch.Tensor]]
    training: bool


WORKLOADS = [
    Workload("mlp train step 256x512", lambda: (mlp_train_step_model(), torch.randn(256, 512)), True),
    Workload("transformer block train step 8x128x256", lambda: (Block(), torch.randn(8, 128, 256)), True),
    Workload("gelu mlp 256x512", lambda: (GeluMLP(), torch.randn(256, 512)), False),
    Workload("transformer block 8x128x256", lambda: (Block().eval(), torch.randn(8, 128, 256)), False),
    Workload("small cnn 16x3x32x32", lambda: (SmallCNN().eval(), torch.randn(16, 3, 32, 32)), False),
]
# ember with its default frontend (Dynamo) and with its own `trace` frontend; Inductor; Dynamo with no compiler
COMPILERS = ("ember", "ember-trace", "inductor", "dynamo")


# ---------------------------------------------------------------------------------------------- one child process


def compiler(name: str) -> Callable[[nn.Module], Callable]:
    import ember  # in every child, so that all start from the same modules imported

    if name == "ember":
        return ember.compile
    if name == "ember-trace":
        return lambda model: ember.compile(model, options={"frontend": "trace"})
    backend = {"inductor": "inductor", "dynamo": "eager"}[name]
    return lambda model: torch.compile(model, backend=backend)


def step(fn: Callable, training: bool) -> Callable[[torch.Tensor], None]:
    if training:
        return lambda x: fn(x).pow(2).mean().backward()

    def infer(x: torch.Tensor) -> None:
        with torch.no_grad():
            fn(x)

    return infer


def seconds(fn: Callable, x: torch.Tensor) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


def measure(compiler_name: str, workload_name: str) -> dict:
    """First call, steady call and their difference (the compile time), seconds."""
    w = next(w for w in WORKLOADS if w.name == workload_name)
    compile_ = compiler(compiler_name)
    tiny = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    step(compile_(tiny), w.training)(torch.randn(4, 8))  # start-up: imports, workers, first-use set-up
    torch.manual_seed(0)
    model, x = w.make()
    run = step(compile_(model), w.training)
    gc.collect()  # a full collection now, not one that start-up's objects would bring on inside the timed call
    first = seconds(run, x)
    run(x)
    steady = statistics.median(seconds(run, x) for _ in range(5))
    return {"first": first, "steady": steady, "compile": first - steady}


# ---------------------------------------------------------------------------------------------- the parent


def run_child(compiler_name: str, workload: str, folder: str) -> dict:
    cmd = [sys.executable, __file__, "--child", compiler_name, workload, folder]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{compiler_name} on {workload!r} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def cold_then_warm(compiler_name: str, workload: str) -> tuple[float, float]:
    folder = tempfile.mkdtemp(prefix="ember-warm-start-")
    try:
        cold = run_child(compiler_name, workload, folder)["compile"]
        warm = run_child(compiler_name, workload, folder)["compile"] if compiler_name != "dynamo" else cold
        return cold, warm
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Row:
    workload: Workload
    times: dict[str, list[tuple[float, float]]]  # compiler → [(cold, warm) per repeat]

    def median(self, compiler_name: str, which: int) -> float:
        return statistics.median(pair[which] for pair in self.times[compiler_name])

    def pair(self, compiler_name: str) -> str:
        cold, warm = self.median(compiler_name, 0), self.median(compiler_name, 1)
        return f"{cold:.2f} | {warm:.2f} | **{warm / cold:.2f}**"

    def line(self) -> str:
        kind = "training" if self.workload.training else "inference"
        versus = self.median("ember", 1) / self.median("inductor", 1)
        return (f"| {self.workload.name} | {kind} | {self.pair('ember')} | {self.pair('ember-trace')} | "
                f"{self.pair('inductor')} | {versus:.2f} | {self.median('dynamo', 0):.2f} |")


HEADER = ["| workload | kind | ember cold s | warm s | warm / cold | ember (trace frontend) cold s | warm s | "
          "warm / cold | inductor cold s | warm s | warm / cold | warm: ember / inductor | Dynamo alone s |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="cold+warm pairs of processes per compiler")
    parser.add_argument("--only", default="", help="workloads whose name contains one of these (comma-separated)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="replace the Warm start section of benchmarks/README.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1])))
        return
    import ember

    chosen = [w for w in WORKLOADS if not args.only or any(o in w.name for o in args.only.split(","))]
    rows = []
    for w in chosen:
        times: dict[str, list] = {c: [] for c in COMPILERS}
        for _ in range(args.repeats):  # the compilers take turns, so that a slow spell of the machine hits all
            for c in COMPILERS:
                times[c].append(cold_then_warm(c, w.name))
        rows.append(Row(w, times))
        print(rows[-1].line(), flush=True)
    text = "\n".join([
        f"`python benchmarks/warm_start.py --repeats {args.repeats}` ({os.cpu_count()} cores, torch "
        f"{torch.__version__}, ember {ember.__version__}): compile time of a fresh process (its first call minus "
        "a steady call) on an empty cache (cold) and on the cache the cold process left (warm), median over "
        f"{args.repeats} cold+warm pairs. ember uses its default frontend (Dynamo) unless the column says "
        "`trace`; \"Dynamo alone\" is torch.compile with backend=\"eager\" (cold only: it keeps no cache).",
        "", *HEADER, *(r.line() for r in rows)])
    print(text)
    if args.write:
        write_section(Path(__file__).with_name("README.md"), "## Warm start", text)


if __name__ == "__main__":
    sys.exit(main())
