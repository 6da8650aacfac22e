"""Activation checkpointing (`torch.utils.checkpoint`) in a training step: the memory it is used for, and its time.

A stack of transformer blocks (layer norm, causal attention, layer norm, GELU MLP), each block run through
`checkpoint(block, x, use_reentrant=False)` or plainly; eager vs ember vs torch.compile (Inductor), both ways. Per
variant, in a fresh process with fresh caches: the first step (the compile), the median step time over
`--repeats` rounds of `--steps` steps, and the memory of one step:
- kept: bytes of the tensors autograd keeps between the forward and the backward (saved tensors' distinct storages,
  the input and the parameters left out), what checkpointing cuts;
- peak: the step's peak of allocated CPU memory above what was allocated before it, from the profiler's memory
  timeline (torch.profiler, `profile_memory=True`; the allocations of ember's kernels included: its buffers are
  torch tensors), the parameters' gradients included.
Usage: python benchmarks/checkpoint.py [--blocks 8] [--steps 5] [--repeats 5] [--threads 2] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness  # noqa: E402

COMPILERS = ("eager", "ember", "inductor")
SHAPE = dict(batch=8, tokens=256, width=256, heads=4)
README = Path(__file__).parent / "README.md"


def build(blocks: int, checkpointed: bool):
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads = heads
            self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln2, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).split(c, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(SHAPE["width"], SHAPE["heads"]) for _ in range(blocks))

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
            return x

    torch.manual_seed(0)
    return Stack()


def measure(variant: str, blocks: int, steps: int, repeats: int, threads: int) -> dict:
    _harness.use_fresh_caches()
    import torch
    from ember_core.testing import kept_for_backward, peak_allocated

    torch.set_num_threads(threads)
    compiler, _, how = variant.partition("+")
    model = build(blocks, how == "checkpoint")
    if compiler == "ember":
        import ember

        fn = ember.compile(model)
    elif compiler == "inductor":
        fn = torch.compile(model, backend="inductor")
    else:
        fn = model
    x = torch.randn(SHAPE["batch"], SHAPE["tokens"], SHAPE["width"])
    params = list(model.parameters())

    def forward():
        return fn(x).pow(2).mean()

    def step():
        model.zero_grad(set_to_none=True)
        forward().backward()

    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    step()
    model.zero_grad(set_to_none=True)
    kept = kept_for_backward(forward, [x, *params])
    model.zero_grad(set_to_none=True)
    peak = peak_allocated(step)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        samples.append((time.perf_counter() - start) / steps * 1e3)
    return {"first_s": first, "ms": statistics.median(samples), "kept": kept, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="replace this benchmark's section of the README")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import json

        print(json.dumps(measure(args.child, args.blocks, args.steps, args.repeats, args.threads)))
        return
    common = ["--blocks", str(args.blocks), "--steps", str(args.steps), "--repeats", str(args.repeats),
              "--threads", str(args.threads)]
    rows = []
    for how in ("", "+checkpoint"):
        for compiler in COMPILERS:
            variant = compiler + how
            r = _harness.run_child(__file__, [variant, *common], timeout_s=3600)
            rows.append(f"| {variant} | {r['kept'] / 2**20:.1f} | {r['peak'] / 2**20:.1f} | {r['ms']:.1f} | "
                        f"{r['first_s']:.1f} |")
            print(rows[-1], flush=True)
    body = "\n".join([
        f"{args.blocks} transformer blocks, {SHAPE}, float32, a training step (loss = mean of squares), "
        f"{args.threads} threads, {_harness.machine()}; one fresh process per variant. kept: MiB autograd keeps "
        "between forward and backward (input and parameters left out); peak: the step's peak of allocated MiB "
        "(profiler memory timeline), both exact from run to run; ms: median step over "
        f"{args.repeats} rounds of {args.steps} steps, each variant alone in its process, one after another (a "
        "step moves about 5% between runs on a 2-core VM: zoo.py times variants in turns for speed); first: the "
        "first step in s (the compile).",
        "",
        "| variant | kept MiB | peak MiB | ms / step | first s |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ])
    print()
    print(body)
    if args.write:
        _harness.write_section(README, "## Activation checkpointing", body)


if __name__ == "__main__":
    main()
