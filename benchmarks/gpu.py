"""GPU workloads side by side: eager, torch.compile (Inductor), ember (codegen triton); float32 and bfloat16.

Each (workload, dtype) is measured in a fresh process with fresh compile caches. Inside it the three variants take
turns within every repeat; each time is the median over repeats of CUDA-event timings of a loop of calls. Reported:
speedups over eager, Inductor's time over ember's, the achieved bandwidth of memory-bound workloads (the bytes
their inputs and outputs must move, once) as a fraction of a `copy_` of as many bytes measured in the same
process, cold compile times (first call minus an eager call), and per-call overhead on a tiny graph.

Usage: python benchmarks/gpu.py [--repeats 10] [--only NAME,...] [--dtypes float32,bfloat16] [--write]
       nox -s bench -- benchmarks/gpu.py
       python benchmarks/gpu.py --smoke   (tiny sizes, no GPU needed: Triton's interpreter on the CPU; checks that
                                           the script runs, measures nothing worth reading)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _harness

SMOKE = "--smoke" in sys.argv
if "--child" in sys.argv:  # fresh caches for cold compile times: set before torch/ember import them
    _harness.use_fresh_caches("ember-gpu-bench-")
    if SMOKE:
        os.environ["TRITON_INTERPRET"] = "1"

import ember  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from models import Block, GeluMLP, SmallCNN, pointwise_chain, rmsnorm  # noqa: E402
from torch import nn  # noqa: E402

DEVICE = "cpu" if SMOKE else "cuda"
EMBER_OPTIONS = {"codegen.cpu": "triton"} if SMOKE else {}


def rows(n: int, d: int) -> tuple[int, int]:
    return (4, max(16, d // 64)) if SMOKE else (n, d)


@dataclass
class Workload:
    name: str
    make: Callable[[torch.dtype], tuple[Callable, tuple]]
    memory_bound: bool
    training: bool = False


def _t(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _norm_workloads(n: int, d: int) -> list[Workload]:
    n, d = rows(n, d)
    size = f"{n}x{d}"
    labels = torch.randint(0, d, (n,), device=DEVICE)
    return [
        Workload(f"softmax {size}", lambda dt: (lambda x: torch.softmax(x, -1), (_t(n, d, dtype=dt),)), True),
        Workload(f"layernorm {size}", lambda dt: (nn.LayerNorm(d).to(DEVICE, dt), (_t(n, d, dtype=dt),)), True),
        Workload(f"rmsnorm {size}", lambda dt: (rmsnorm, (_t(n, d, dtype=dt), _t(d, dtype=dt))), True),
        Workload(f"cross-entropy {size}", lambda dt: (lambda x: F.cross_entropy(x, labels), (_t(n, d, dtype=dt),)),
                 True),
    ]


def _models() -> list[Workload]:
    b, t = (2, 8) if SMOKE else (32, 512)
    return [
        Workload("gelu mlp", lambda dt: (GeluMLP(1024).to(DEVICE, dt), (_t(b * t, 1024, dtype=dt),)), False),
        Workload("transformer block", lambda dt: (Block(512, 8).to(DEVICE, dt).eval(), (_t(b, t, 512, dtype=dt),)),
                 False),
        Workload("transformer block train step", lambda dt: (Block(512, 8).to(DEVICE, dt),
                                                             (_t(b, t, 512, dtype=dt),)), False, True),
        Workload("small cnn", lambda dt: (SmallCNN().to(DEVICE, dt).eval(), (_t(b * 4, 3, 32, 32, dtype=dt),)), False),
    ]


CHAIN = 1 << (12 if SMOKE else 26)
WORKLOADS = [
    Workload("pointwise chain 64M", lambda dt: (pointwise_chain, (_t(CHAIN, dtype=dt), _t(CHAIN, dtype=dt))), True),
    *_norm_workloads(8192, 4096), *_norm_workloads(32768, 1024), *_models(),
]


# ---------------------------------------------------------------------------------------------- one process


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def seconds_per_call(fn: Callable, calls: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def timed(fns: dict[str, Callable], repeats: int) -> dict[str, float]:
    """Median seconds per call; the variants take turns inside each repeat; each loop lasts about 50 ms."""
    calls = {n: max(1, int(0.05 / max(seconds_per_call(fn, 1), 1e-7))) for n, fn in fns.items()}
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(seconds_per_call(fn, calls[name]))
    return {n: statistics.median(s) for n, s in samples.items()}


def step(fn: Callable, args: tuple, training: bool) -> Callable:
    if training:
        return lambda: fn(*args).float().pow(2).mean().backward()
    return lambda: fn(*args)


def moved_bytes(args: tuple, out: object) -> int:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += [out] if isinstance(out, torch.Tensor) else []
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(name: str, dtype: str, repeats: int) -> dict:
    w = next(w for w in WORKLOADS if w.name == name)
    dt = getattr(torch, dtype)
    fn, args = w.make(dt)
    compiled = {"inductor": torch.compile(fn, backend="inductor"), "ember": ember.compile(fn, options=EMBER_OPTIONS)}
    fns = {"eager": step(fn, args, w.training), **{k: step(c, args, w.training) for k, c in compiled.items()}}
    cold = {}
    for label in ("inductor", "ember"):
        cold[label] = seconds_per_call(fns[label], 1) - seconds_per_call(fns["eager"], 1)
    result: dict = {"cold": cold}
    with torch.enable_grad() if w.training else torch.no_grad():
        if w.memory_bound:
            nbytes = moved_bytes(args, fn(*args))
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device=DEVICE)
            dst = torch.empty_like(src)
            fns["copy"] = lambda: dst.copy_(src)  # reads and writes nbytes / 2 each: nbytes moved
            result["bytes"] = nbytes
        result["times"] = timed(fns, repeats)
    return result


def overhead(repeats: int) -> dict[str, float]:
    """Seconds per call of a tiny graph (launch and wrapper costs, not kernels)."""
    x = torch.randn(8, device=DEVICE)
    fn = lambda t: (t + 1) * 2  # noqa: E731
    fns = {"eager": fn, "inductor": torch.compile(fn, backend="inductor"),
           "ember": ember.compile(fn, options=EMBER_OPTIONS)}
    for f in fns.values():
        f(x)
    return timed({n: (lambda f=f: f(x)) for n, f in fns.items()}, repeats)


# ---------------------------------------------------------------------------------------------- the table


def run_child(args: list[str]) -> dict:
    return _harness.run_child(__file__, [*args, *(["--smoke"] if SMOKE else [])])


def line(w: Workload, dtype: str, r: dict) -> str:
    t = r["times"]
    bandwidth = ""
    if "copy" in t:
        gbs = r["bytes"] / t["ember"] / 1e9
        bandwidth = f"{gbs:.0f} GB/s = {t['copy'] / t['ember']:.0%} of copy"
    return (f"| {w.name} | {dtype} | {t['eager'] * 1e3:.3f} | {t['eager'] / t['ember']:.2f}x | "
            f"{t['eager'] / t['inductor']:.2f}x | **{t['inductor'] / t['ember']:.2f}** | {bandwidth} | "
            f"{r['cold']['inductor']:.2f} | {r['cold']['ember']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", default="")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--child", nargs="*", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--write", action="store_true", help="replace the GPU section of benchmarks/README.md")
    opts = parser.parse_args()
    if opts.child is not None:
        kind, *rest = opts.child
        print(json.dumps(overhead(opts.repeats) if kind == "overhead" else measure(*rest, opts.repeats)))
        return
    if not SMOKE and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py needs a CUDA device (or --smoke, which runs Triton's CPU interpreter)")
    only = {s.strip() for s in opts.only.split(",") if s.strip()}
    device = "CPU (smoke: Triton interpreter)" if SMOKE else torch.cuda.get_device_name()
    out = [f"`python benchmarks/gpu.py --repeats {opts.repeats}` on {device}, torch {torch.__version__}: median "
           "time per call; \"inductor / ember\" above 1: ember faster; cold compile seconds with fresh caches.", "",
           "| workload | dtype | eager ms | ember speedup | inductor speedup | inductor / ember | ember bandwidth "
           "| inductor cold s | ember cold s |", "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for w in WORKLOADS:
        if only and w.name not in only:
            continue
        for dtype in opts.dtypes.split(","):
            out.append(line(w, dtype, run_child(["measure", w.name, dtype, "--repeats", str(opts.repeats)])))
            print(out[-1], flush=True)
    calls = run_child(["overhead", "--repeats", str(opts.repeats)])
    out += ["", "Per-call overhead, tiny graph: " + ", ".join(f"{n} {s * 1e6:.1f} µs" for n, s in calls.items())]
    print("\n".join(out))
    if opts.write:
        _harness.write_section(Path(__file__).with_name("README.md"), "## GPU", "\n".join(out))


if __name__ == "__main__":
    main()
