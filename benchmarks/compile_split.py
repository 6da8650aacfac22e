"""Cold build time of a big training graph, its C++ as one unit or split in parts built on several cores.

The graphs are a GPT-like model's (4 transformer blocks with attention written out, d=256) forward and backward
for one training step. Each build gets a fresh cache key (a dummy -D flag), so every g++ runs; times are the wall
time of `compile_many` until the libraries are loaded, median of `--repeats`. Rows: each graph alone, then both
together (as a training step builds them), with the unit whole (`part_lines` beyond any unit) and split (the
default `PART_LINES`, at most one part per core), with the CPU time the compilers took. Then, for each graph split
in 1, 2 and 4 parts, each part's g++ CPU time compiled alone (the fastest of the repeats): what the parts cost
beyond one unit, and the longest part, which is the build's wall time on idle cores, whatever the machine's load.

Usage: python benchmarks/compile_split.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-bench-split-"))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import ember  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from ember_codegen_cpp import FLAGS, Builder, CppCodegen  # noqa: E402
from ember_codegen_cpp._build import PART_LINES, compiler, run_compiler  # noqa: E402
from ember_codegen_cpp._program import build_program, translation_units, unit_lines  # noqa: E402
from ember_lowering import lower  # noqa: E402
from models import HandAttentionBlock  # noqa: E402
from torch import nn  # noqa: E402

_fresh = itertools.count()


class GPT(nn.Module):
    def __init__(self, vocab=512, d=256, ctx=64, n_blocks=4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(HandAttentionBlock(d, 4, ctx, causal=True) for _ in range(n_blocks))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def training_graphs() -> list:
    model = ember.compile(GPT())
    idx, targets = torch.randint(0, 512, (8, 64)), torch.randint(0, 512, (8, 64))
    with ember.record_events() as rec:
        model(idx, targets).backward()
    return [e.graph for e in rec.events if e.kind == "kernels_generated"]


def cold_build(graphs: list, part_lines: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the compilers)."""
    builder = Builder(flags=FLAGS + (f"-DEMBER_COLD_{os.getpid()}_{next(_fresh)}",), part_lines=part_lines)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    CppCodegen(builder).compile_many(graphs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    graphs = training_graphs()
    print(f"cores {os.cpu_count()}; cold build: wall s / g++ CPU s, median of {args.repeats}")
    configs = {"one unit": 1 << 40, f"split ({PART_LINES})": PART_LINES}
    print(f"{'graphs':<28}" + "".join(f"{c:>16}" for c in configs))
    for name, group in [*((g.name, [g]) for g in graphs), ("forward + backward", graphs)]:
        times: dict[str, list[tuple[float, float]]] = {c: [] for c in configs}
        for _ in range(args.repeats):  # the configurations take turns
            for c, lines in configs.items():
                times[c].append(cold_build(group, lines))
        cells = [f"{statistics.median(w for w, _ in t):.2f} / {statistics.median(u for _, u in t):.2f}"
                 for t in times.values()]
        print(f"{name:<28}" + "".join(f"{x:>16}" for x in cells))
    for g in graphs:
        program = build_program(lower(g, emit_event=False))
        print(f"{g.name}: {unit_lines(program)} kernel lines; g++ CPU s of each part alone")
        for parts in (1, 2, 4):
            units = translation_units(program, parts)
            best = [min(part_cpu(u) for _ in range(args.repeats)) for u in units]
            print(f"  {len(units)} parts: {' '.join(f'{t:.2f}' for t in best)}  (sum {sum(best):.2f}, "
                  f"longest {max(best):.2f})")


def part_cpu(source: str) -> float:
    with tempfile.TemporaryDirectory() as work:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run_compiler(compiler(), Builder().flags, source, Path(work))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


if __name__ == "__main__":
    main()
