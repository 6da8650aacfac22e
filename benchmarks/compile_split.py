"""Cold build time of a big training graph, its C++ as one unit or split in parts built on several cores.

The graphs are a GPT-like model's (4 transformer blocks with attention written out, d=256) forward and backward
for one training step. Each build gets a fresh cache key (a dummy -D flag), so every g++ runs; times are the wall
time of `compile_many` until the libraries are loaded, median of `--repeats`. Rows: each graph alone, then both
together (as a training step builds them), with the unit whole (`part_lines` beyond any unit) and split (the
default `PART_LINES`, one part per core).

Usage: python benchmarks/compile_split.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
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
from ember_codegen_cpp._build import PART_LINES  # noqa: E402
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


def cold_build(graphs: list, part_lines: int) -> float:
    builder = Builder(flags=FLAGS + (f"-DEMBER_COLD_{os.getpid()}_{next(_fresh)}",), part_lines=part_lines)
    start = time.perf_counter()
    CppCodegen(builder).compile_many(graphs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    graphs = training_graphs()
    print(f"cores {os.cpu_count()}, PART_LINES {PART_LINES}; cold build s, median of {args.repeats}")
    print(f"{'graphs':<32}{'one unit':>10}{'split':>10}")
    for name, group in [*((g.name, [g]) for g in graphs), ("forward + backward", graphs)]:
        times: dict[str, list[float]] = {"one": [], "split": []}
        for _ in range(args.repeats):  # the two take turns
            times["one"].append(cold_build(group, 1 << 40))
            times["split"].append(cold_build(group, PART_LINES))
        one, split = (statistics.median(times[k]) for k in ("one", "split"))
        print(f"{name:<32}{one:>10.2f}{split:>10.2f}")


if __name__ == "__main__":
    main()
