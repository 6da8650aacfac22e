"""CPU workloads side by side: eager, torch.compile (Inductor), ember; 1 and 2 threads.

Each (threads, workload) pair is measured in `--procs` fresh processes, each with fresh compile caches. Inside a
process the variants take turns within every repeat and each gives its median time per call; across processes the
table reports the median of the per-process ratios and their range. Several processes, because on a shared VM the
same kernel measures up to 40% apart from one process to the next (where its buffers land, what the neighbours do),
which no number of repeats inside one process averages out.

The children run with glibc's malloc thresholds fixed (MALLOC_MMAP_THRESHOLD_=32 MiB, a huge trim threshold): with
the defaults, whether a 16 MiB output comes from reused heap or from fresh pages (4096 page faults per call) depends
on the allocation history of the variants before it, which moved eager's time 4x between processes. Fixed, every
variant reuses its memory, and the table compares kernels rather than the page-fault handler.

Also reported: cold compile times (first call minus an eager call, fresh caches, after one tiny compile by each
compiler so that process start-up is not counted; the median over processes) and the
pointwise chain's bandwidth against a plain tensor copy of as many bytes, measured in the same processes. Before
timing, each compiled variant's output (and a training step's gradients) is compared with eager's
(`_harness.error`): a row whose result is wrong in any process is marked WRONG, and the script then exits 1
without writing, since a speed of a wrong result is no speed.
With `--mode max-autotune` (or another mode) both compilers compile in that mode, and ember without it is
measured too: the table's last column is then ember's default time over its tuned time (above 1: tuning helped).

Usage: python benchmarks/cpu.py [--threads 1,2] [--repeats 5] [--procs 3] [--only NAME,...] [--mode M] [--write]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _harness
from _harness import first_call_s, spread, timed

if "--child" in sys.argv:  # fresh caches for cold compile times: set before torch/ember import them
    _harness.use_fresh_caches()

import ember  # noqa: E402
import torch  # noqa: E402
from models import (  # noqa: E402
    Block,
    CrossEntropy,
    GeluMLP,
    SmallCNN,
    mlp_train_step_model,
    pointwise_chain,
    rmsnorm,
)
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


def resize(scale: float, mode: str) -> Callable:
    return lambda x: F.interpolate(x, scale_factor=scale, mode=mode).relu()


@dataclass
class Workload:
    name: str
    make: Callable[[], tuple[Callable, tuple]]  # → (function or module, inputs)
    memory_bound: bool
    training: bool = False


WORKLOADS = [
    Workload("pointwise chain 4M", lambda: (pointwise_chain, (torch.randn(4 << 20), torch.randn(4 << 20))), True),
    Workload("softmax 4096x1024", lambda: (lambda x: torch.softmax(x, -1), (torch.randn(4096, 1024),)), True),
    Workload("layernorm 4096x1024", lambda: (nn.LayerNorm(1024), (torch.randn(4096, 1024),)), True),
    Workload("rmsnorm 4096x1024", lambda: (rmsnorm, (torch.randn(4096, 1024), torch.randn(1024))), True),
    Workload("gelu mlp 256x512", lambda: (GeluMLP(), (torch.randn(256, 512),)), False),
    Workload("transformer block 8x128x256", lambda: (Block(), (torch.randn(8, 128, 256),)), False),
    Workload("small cnn 16x3x32x32", lambda: (SmallCNN().eval(), (torch.randn(16, 3, 32, 32),)), False),
    Workload("mlp train step 256x512", lambda: (mlp_train_step_model(), (torch.randn(256, 512),)), False, True),
    Workload("cross-entropy train step 2048x8000",
             lambda: (CrossEntropy(8000), (torch.randn(2048, 8000), torch.randint(0, 8000, (2048,)))), True, True),
    # resizes as FPN and U-Net decoders make them (x2 up) and as a pyramid's input (/2 down), then an activation
    Workload("upsample nearest x2 8x64x64x64", lambda: (resize(2.0, "nearest"), (torch.randn(8, 64, 64, 64),)), True),
    Workload("upsample bilinear x2 8x64x64x64", lambda: (resize(2.0, "bilinear"), (torch.randn(8, 64, 64, 64),)),
             True),
    Workload("downsample bilinear /2 8x32x128x128", lambda: (resize(0.5, "bilinear"),
                                                             (torch.randn(8, 32, 128, 128),)), True),
]


def step_fn(fn: Callable, training: bool) -> Callable:
    if not training:
        return fn

    def step(*args):
        loss = fn(*args).pow(2).mean()
        loss.backward()
        return loss

    return step


def compilers(mode: str | None) -> dict[str, Callable[[Callable], Callable]]:
    made = {"inductor": lambda f: torch.compile(f, backend="inductor", mode=mode),
            "ember": lambda f: ember.compile(f, mode=mode)}
    if mode is not None:
        made["ember_default"] = ember.compile
    return made


def variants(w: Workload, mode: str | None) -> dict[str, tuple[Callable, tuple, Callable]]:
    """Each variant's (function, inputs, the function or module it compiled: a module's own copy)."""
    fn, args = w.make()
    made = {"eager": (fn, args, fn)}
    for label, wrap in compilers(mode).items():
        twin = copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn
        made[label] = (wrap(twin), args, twin)
    return made


def params(source: Callable, training: bool) -> list:
    """The parameters whose gradients a variant's training step is checked by (each compiled module has its own)."""
    return list(source.parameters()) if training and isinstance(source, nn.Module) else []


COPY_ELEMENTS = 6 << 20  # float32: 48 MB moved, as the pointwise chain's two reads and one write of 4M elements


def measure(name: str, threads: int, repeats: int, mode: str | None = None) -> dict:
    """One process's measurement of one workload: median seconds per call of each variant, cold compile times."""
    torch.set_num_threads(threads)
    w = next(w for w in WORKLOADS if w.name == name)
    made = variants(w, mode)
    fns = {n: step_fn(fn, w.training) for n, (fn, _, _) in made.items()}
    args = made["eager"][1]
    result: dict = {"cold": {}}
    for compile_ in compilers(mode).values():
        compile_(lambda t: t + 1)(torch.ones(8))  # one-time process start-up (imports, workers) is not the workload's
    with torch.enable_grad() if w.training else torch.no_grad():
        for n in compilers(mode):
            result["cold"][n] = first_call_s(fns[n], *args) - first_call_s(fns["eager"], *args)
    with torch.enable_grad() if w.training else torch.no_grad():
        results = {n: _harness.outcome(lambda n=n: fns[n](*args), params(made[n][2], w.training)) for n in made}
    result["errors"] = {n: _harness.error(results[n], results["eager"]) for n in compilers(mode)}
    with torch.enable_grad() if w.training else torch.no_grad():
        if w.name.startswith("pointwise"):  # a copy of as many bytes (neither fits in the cache)
            src, dst = torch.randn(COPY_ELEMENTS), torch.empty(COPY_ELEMENTS)
            fns["copy"] = lambda *_: dst.copy_(src)
        result["times"] = timed(fns, args, repeats)
    if "copy" in result["times"]:
        result["copy_gbs"] = 2 * COPY_ELEMENTS * 4 / result["times"].pop("copy") / 1e9  # one read, one write
        result["chain_gbs"] = 4 * args[0].numel() * 3 / result["times"]["ember"] / 1e9  # two reads, one write
    return result


def run_child(name: str, threads: int, repeats: int, mode: str | None = None) -> dict:
    args = [name, "--threads", str(threads), "--repeats", str(repeats), *(["--mode", mode] if mode else [])]
    return _harness.run_child(__file__, args)


@dataclass
class Row:
    threads: int
    workload: Workload
    runs: list[dict]

    def median_time(self, variant: str) -> float:
        return statistics.median(r["times"][variant] for r in self.runs)

    def ratios(self) -> list[float]:
        """Inductor's time over ember's, one per process."""
        return [r["times"]["inductor"] / r["times"]["ember"] for r in self.runs]

    def ratio(self) -> float:
        return statistics.median(self.ratios())

    def line(self) -> str:
        eager, rs = self.median_time("eager"), self.ratios()
        extra = ""
        if "copy_gbs" in self.runs[0]:
            chain = statistics.median(r["chain_gbs"] for r in self.runs)
            share = statistics.median(r["chain_gbs"] / r["copy_gbs"] for r in self.runs)
            copy_ = statistics.median(r["copy_gbs"] for r in self.runs)
            extra = f"{chain:.1f} GB/s = {share:.0%} of copy ({copy_:.1f} GB/s)"
        if "ember_default" in self.runs[0]["times"]:
            tuned = [r["times"]["ember_default"] / r["times"]["ember"] for r in self.runs]
            extra = f"{statistics.median(tuned):.2f} ({min(tuned):.2f}–{max(tuned):.2f})"
        bad = self.wrong()
        return (f"| {self.threads} | {self.workload.name} | {eager * 1e3:.3f} | "
                f"{eager / self.median_time('ember'):.2f}x | {eager / self.median_time('inductor'):.2f}x | "
                f"**{self.ratio():.2f}** | {spread(rs)} | {extra} |"
                + (f" WRONG against eager: {', '.join(bad)}" if bad else ""))

    def wrong(self) -> list[str]:
        """The variants whose result differed from eager's in any process (`_harness.error`), each with its worst."""
        worst = {n: max(r["errors"][n] for r in self.runs) for n in self.runs[0]["errors"]}
        return _harness.wrong(worst, "float32")


def summary(threads: int, rows: list[Row]) -> str:
    geo = statistics.geometric_mean([r.ratio() for r in rows])
    memory = [r.ratio() for r in rows if r.workload.memory_bound]
    mem = f"{statistics.geometric_mean(memory):.2f}" if memory else "n/a"
    return f"| {threads} | geomean (all) / memory-bound | | | | **{geo:.2f}** / **{mem}** | | |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--procs", type=int, default=3, help="fresh processes per (threads, workload)")
    parser.add_argument("--only", default="")
    parser.add_argument("--mode", default=None, help="compile both in this mode (max-autotune ...)")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="replace the CPU section of benchmarks/README.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, int(args.threads), args.repeats, args.mode)))
        return
    chosen = [w for w in WORKLOADS if not args.only or any(o in w.name for o in args.only.split(","))]
    mode = f" --mode {args.mode}" if args.mode else ""
    last = "ember default / ember tuned" if args.mode else "bandwidth"
    lines = [
        f"`python benchmarks/cpu.py --procs {args.procs} --repeats {args.repeats}{mode}` ({os.cpu_count()} cores, "
        f"torch {torch.__version__}, ember {ember.__version__}, codegen {_harness.cpu_codegen()}): median time per "
        f"call over {args.procs} fresh processes, speedups over eager; \"inductor / ember\" is the median of the "
        "per-process ratios of Inductor's time to ember's (above 1: ember faster), \"range\" their spread.",
        "",
        f"| threads | workload | eager ms | ember speedup | inductor speedup | inductor / ember | range | {last} |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    all_rows: list[Row] = []
    for threads in [int(t) for t in args.threads.split(",")]:
        rows = []
        for w in chosen:
            runs = [run_child(w.name, threads, args.repeats, args.mode) for _ in range(args.procs)]
            rows.append(Row(threads, w, runs))
            print(rows[-1].line(), flush=True)
        lines += [r.line() for r in rows] + [summary(threads, rows)]
        print(lines[-1], flush=True)
        all_rows += rows
    extra = " | ember default" if args.mode else ""
    lines += ["", "Cold compile time (first call minus an eager call, fresh caches; median over processes and thread "
              "counts), seconds:", "", f"| workload | inductor | ember | ember / inductor{extra} |",
              "|---|---:|---:|---:|" + ("---:|" if args.mode else "")]
    for w in chosen:
        runs = [r for row in all_rows if row.workload is w for r in row.runs]
        cold = {n: statistics.median(r["cold"][n] for r in runs) for n in runs[0]["cold"]}
        default = f" | {cold['ember_default']:.2f}" if "ember_default" in cold else ""
        lines.append(f"| {w.name} | {cold['inductor']:.2f} | {cold['ember']:.2f} | "
                     f"{cold['ember'] / cold['inductor']:.2f}{default} |")
    text = "\n".join(lines)
    print(text)
    wrong = [r for r in all_rows if r.wrong()]
    if wrong:  # a speed of a wrong result is no speed: nothing is written
        sys.exit(f"cpu.py: {len(wrong)} rows WRONG against eager: {', '.join(r.workload.name for r in wrong)}")
    if args.write:
        heading = f"## CPU, mode {args.mode}" if args.mode else "## CPU"
        heading += f" on {_harness.machine()}"  # one section per machine measured
        _harness.write_section(Path(__file__).with_name("README.md"), heading, text)


if __name__ == "__main__":
    sys.exit(main())
