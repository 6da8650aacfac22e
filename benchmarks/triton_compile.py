"""Cold compile time of Triton programs: the build's kernels compiled by threads alone, against worker processes
first (ember_codegen_triton/_compile_workers.py). Each variant runs in a fresh process with empty ember and Triton
caches; the number is the build's wall time for a few programs compiled together (`compile_many`), medians over
repeats. The workers start before the graphs are traced, as they start with the first CUDA graph's compile.

With CUDA the programs are a transformer block's forward and backward and a small CNN's forward, on the GPU. Without,
the same graphs are compiled for the stand-in sm_90 driver (ember_codegen_triton.testing): Triton's whole pipeline
and ptxas, no launch.

With `--warm`, each cold build is followed by two processes on the caches it left (no workers): one binds every
kernel from the module entry's binaries manifest (`_binaries.py`), the other with the manifest withheld, through
Triton's JIT and its cache (what a warm start did before). Kernels launch through lean launchers in all three, as
on CUDA.

With `--layers N`, cold builds of N identical blocks: kernels of one body share one function (`_dedup.py`), against
every kernel compiled on its own.

Usage: python benchmarks/triton_compile.py [--workers 0,4] [--repeats 3] [--warm] [--layers 6]
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

    torch.manual_seed(0)  # the same graphs (their constants included) in every process: a warm one finds their plans
    layers = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--layers=")), "1"))
    block = (Block() if layers == 1 else torch.nn.Sequential(*[Block() for _ in range(layers)])).to(device)
    cnn = SmallCNN().to(device).eval()
    x, image = torch.randn(4, 16, 256, device=device), torch.randn(2, 3, 16, 16, device=device)
    graphs: list = []
    graphs.append(graph(lambda x: block(x), x))
    graphs.append(graph(lambda x: torch.autograd.grad(block(x).sum(), [x, *block.parameters()]),
                        x.requires_grad_()))
    graphs.append(graph(lambda x: cnn(x), image))

    class Any(TritonCodegen):
        def serves(self, device: str) -> bool:  # CPU graphs too, compiled for the stand-in GPU
            return True

        def lean_launch(self, program) -> bool:  # bound as on CUDA (--warm measures the binding)
            return "--lean" in sys.argv

    if "--no-dedup" in sys.argv:  # every kernel its own function, as before `_dedup.py`
        import ember_codegen_triton._codegen as codegen

        codegen.module_text = lambda kernels: "\n\n\n".join(k.text for k in kernels)
    if "--jit-bind" in sys.argv:  # the manifest withheld: each kernel found again through Triton's JIT
        import ember_codegen_triton._codegen as codegen

        codegen.prebuilt = lambda *args: {}

    start = time.perf_counter()
    compiled = Any().compile_many(graphs, {})
    seconds = time.perf_counter() - start
    kernels = sum(c.source.count("@triton.jit") for c in compiled)
    print(json.dumps({"seconds": seconds, "kernels": kernels}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default=f"0,{max(2, min(8, (os.cpu_count() or 1) - 1))}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="also warm processes: manifest against Triton's JIT")
    parser.add_argument("--layers", type=int, default=1, help="also cold builds of this many blocks, kernels of one "
                        "body compiled once against each alone")
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
    if args.warm:
        warm(args.repeats, here)
    if args.layers > 1:
        dedup(args.layers, args.repeats, here)


def dedup(layers: int, repeats: int, here: Path) -> None:
    """Cold builds of a stack of `layers` identical blocks: kernels of one body compiled once, or each alone."""
    results: dict[str, list[float]] = {}
    functions = {}
    for _ in range(repeats):
        for label, flags in (("one function a body", []), ("a function a kernel", ["--no-dedup"])):
            with tempfile.TemporaryDirectory() as cache:
                row = run_child([f"--layers={layers}", *flags], cache, "0", here)
            results.setdefault(label, []).append(row["seconds"])
            functions[label] = row["kernels"]
    print(f"# cold build, {layers} blocks forward and backward and the CNN, median of {repeats}")
    for label, values in results.items():
        print(f"{label:22s} {statistics.median(values):7.2f} s   ({functions[label]} @triton.jit functions)")


def run_child(flags: list[str], cache: str, workers: str, here: Path) -> dict:
    env = {**os.environ, "EMBER_TRITON_COMPILE_WORKERS": workers, "EMBER_CACHE_DIR": cache,
           "TRITON_CACHE_DIR": str(Path(cache) / "triton"), "PYTHONPATH": str(here)}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, __file__, "--child", *flags], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm(repeats: int, here: Path) -> None:
    """Cold, then warm with the binaries manifest, then warm through Triton's JIT, on one cache each repeat."""
    results: dict[str, list[float]] = {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            for label, flags in (("cold", []), ("warm, manifest", []), ("warm, Triton's JIT", ["--jit-bind"])):
                row = run_child(["--lean", *flags], cache, "0", here)
                results.setdefault(label, []).append(row["seconds"])
    print(f"# build and bind of the same programs (lean launchers), median of {repeats}")
    for label, values in results.items():
        print(f"{label:20s} {statistics.median(values):7.2f} s")


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
