"""Cold compile time of Triton programs: the build's kernels compiled by threads alone, against worker processes
first (ember_codegen_triton/_compile_workers.py). Each variant runs in a fresh process with empty ember and Triton
caches; the number is the build's wall time for a few programs compiled together (`compile_many`), medians over
repeats. The workers start before the graphs are traced, as they start with the first CUDA graph's compile.

With CUDA the programs are a transformer block's forward and backward and a small CNN's forward, on the GPU. Without,
the same graphs are compiled for the stand-in sm_90 driver (ember_codegen_triton.testing): Triton's whole pipeline
and ptxas, no launch.

Usage: python benchmarks/triton_compile.py [--workers 0,4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    import torch.utils._pytree as pytree
    from ember_codegen_triton import TritonCodegen
    from ember_codegen_triton._compile_workers import start
    from ember_core import canonical_symbols, from_fx
    from models import Block, SmallCNN
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    start()  # as the first CUDA graph's compile does: the workers import while the graphs are traced and lowered
    cuda = torch.cuda.is_available()
    if not cuda:
        from ember_codegen_triton.testing import StandInGPU
        from triton.runtime.driver import driver

        driver.set_active(StandInGPU())
    device = "cuda" if cuda else "cpu"

    def graph(fn, *args):
        flat = lambda *a: tuple(pytree.tree_leaves(fn(*a)))  # noqa: E731
        gm = make_fx(flat, decomposition_table=core_aten_decompositions(), tracing_mode="fake",
                     _allow_non_fake_inputs=True)(*args)
        return canonical_symbols(from_fx(gm, name=f"g{len(graphs)}"))

    block, cnn = Block().to(device), SmallCNN().to(device).eval()
    x, image = torch.randn(4, 16, 256, device=device), torch.randn(2, 3, 16, 16, device=device)
    graphs: list = []
    graphs.append(graph(lambda x: block(x), x))
    graphs.append(graph(lambda x: torch.autograd.grad(block(x).sum(), [x, *block.parameters()]),
                        x.requires_grad_()))
    graphs.append(graph(lambda x: cnn(x), image))

    class Any(TritonCodegen):
        def serves(self, device: str) -> bool:  # CPU graphs too, compiled for the stand-in GPU
            return True

    start = time.perf_counter()
    compiled = Any().compile_many(graphs, {})
    seconds = time.perf_counter() - start
    kernels = sum(c.source.count("@triton.jit") for c in compiled)
    print(json.dumps({"seconds": seconds, "kernels": kernels}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default=f"0,{max(2, min(8, (os.cpu_count() or 1) - 1))}")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    results: dict[str, list[float]] = {}
    kernels = 0
    for _ in range(args.repeats):
        for workers in args.workers.split(","):  # taking turns: a noisy neighbour slows both alike
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "EMBER_TRITON_COMPILE_WORKERS": workers, "EMBER_CACHE_DIR": cache,
                       "TRITON_CACHE_DIR": str(Path(cache) / "triton"), "PYTHONPATH": str(here)}
                env.pop("TRITON_INTERPRET", None)
                done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            row = json.loads(done.stdout.strip().splitlines()[-1])
            kernels = row["kernels"]
            results.setdefault(workers, []).append(row["seconds"])
    print(f"# cold build of 3 programs ({kernels} Triton kernels), median of {args.repeats}; {os.cpu_count()} cores")
    base = statistics.median(results[args.workers.split(",")[0]])
    for workers, values in results.items():
        median = statistics.median(values)
        print(f"workers={workers:3s} {median:7.2f} s   {base / median:5.2f}x")


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
