"""GPU workloads side by side: eager, torch.compile (Inductor), ember (codegen triton); float32 and bfloat16.

Each (workload, dtype) is measured in a fresh process with fresh compile caches. Inside it the variants take turns
within every repeat; each wall time is the median over repeats of a loop of back-to-back calls (synchronized at its
ends), so it is the larger of what the GPU spends and what launching costs on the CPU. Next to it, the GPU's own
kernel time per call: the sum of the CUDA kernels' (and copies') durations under torch.profiler over 20 calls. A
variant whose wall time is 1.5x or more its kernel time is launch-bound: the GPU idles between kernels, and its
wall time measures launches and Python, not kernels (what the first H200 run timed: /work/shared/gpu). Reported:
speedups over eager (wall), Inductor's time over ember's by wall and by kernels, the launch-bound variants, the
achieved bandwidth of memory-bound workloads (the bytes their inputs and outputs must move, once) as a fraction of a
`copy_` of as many bytes measured in the same process, cold compile times (first call minus an eager call), and
per-call overhead on a tiny graph. Each compiled variant's outputs (and, for a training step, its parameters'
gradients) are checked against eager's first: a row whose normwise error passes 1e-2 (float32) or 0.1 (bfloat16)
ends "WRONG against eager" and counts as failed, so that no speed of a wrong result is read as a speed; one where
ember fell back (a build that failed runs ATen through the interpreter codegen) says so, by cause. The last
line counts rows, failed rows and launch-bound rows.

Usage: python benchmarks/gpu.py [--repeats 10] [--only NAME,...] [--dtypes float32,bfloat16] [--write]
                                [--variants eager,inductor,ember] [--timeout S] [--no-overhead]
                                [--mode max-autotune-no-cudagraphs]
       nox -s bench -- benchmarks/gpu.py
       python benchmarks/gpu.py --smoke   (tiny sizes, no GPU needed: Triton's interpreter on the CPU; checks that
                                           the script runs, measures nothing worth reading; kernel time is n/a
                                           there: the interpreter runs kernels as Python, with no device to time)
`--mode` compiles Inductor and ember both in that torch.compile mode: under max-autotune each measures its own
Triton matmul templates against cuBLAS (the GEMM workloads: `--only gemm`). `--only` takes workload names, or their
first words (`softmax` selects every softmax row). A workload whose child
fails or runs past `--timeout` seconds gets a `failed` row and the script exits 1 after the others.
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
from ember_core.testing import FallbackRecorder  # noqa: E402
from models import Block, CrossEntropy, GeluMLP, SmallCNN, pointwise_chain, rmsnorm  # noqa: E402
from torch import nn  # noqa: E402

DEVICE = "cpu" if SMOKE else "cuda"
EMBER_OPTIONS = {"codegen.cpu": "triton"} if SMOKE else {}
VARIANTS = ("eager", "inductor", "ember")
KERNEL_CALLS = 20  # calls under the profiler for the kernel time
LAUNCH_BOUND = 1.5  # wall time / kernel time from which a variant counts as launch-bound


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


def _lm_head_loss() -> list[Workload]:
    """Cross-entropy over GPT-2's vocabulary in training (4096 tokens, 50257 classes): the log-probabilities' row
    statistics saved instead of the 0.8 GB of them, the targets' gradient a select fused into the softmax's
    backward."""
    n, v = (8, 50) if SMOKE else (4096, 50257)
    labels = torch.randint(0, v, (n,), device=DEVICE)
    return [Workload(f"cross-entropy train step {n}x{v}",
                     lambda dt: (CrossEntropy(v).to(DEVICE, dt), (_t(n, v, dtype=dt), labels)), True, True)]


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


def _reduction_workloads() -> list[Workload]:
    """Reductions with few results (batch norm's statistics in training: 64 channels of 401,408 values each) and
    reductions across rows (a weight's gradient: a sum over 8192 rows)."""
    n, c, hw = (4, 8, 8) if SMOKE else (32, 64, 112)
    r, d = (64, 16) if SMOKE else (8192, 4096)
    return [
        Workload(f"batch norm train step {n}x{c}x{hw}x{hw}",
                 lambda dt: (nn.BatchNorm2d(c).to(DEVICE, dt), (_t(n, c, hw, hw, dtype=dt),)), False, True),
        Workload(f"column sum {r}x{d}", lambda dt: (lambda x: x.sum(0), (_t(r, d, dtype=dt),)), True),
    ]


def _gemm_workloads() -> list[Workload]:
    """A GEMM and its epilogue: what a matmul template fuses under max-autotune (`--mode`): a linear's bias and
    GELU, an attention score's scale, a residual add after a projection."""
    m, k, n = (16, 32, 48) if SMOKE else (8192, 1024, 4096)
    b, t, d = (2, 16, 16) if SMOKE else (32, 512, 64)
    return [
        Workload(f"gemm linear gelu {m}x{k}x{n}", lambda dt: (lambda x, w, bias: F.gelu(F.linear(x, w, bias)),
                                                             (_t(m, k, dtype=dt), _t(n, k, dtype=dt), _t(n, dtype=dt))),
                 False),
        Workload(f"gemm bmm scale {b}x{t}x{d}", lambda dt: (lambda q, kk: (q @ kk.transpose(-1, -2)) * 0.125,
                                                           (_t(b, t, d, dtype=dt), _t(b, t, d, dtype=dt))), False),
        Workload(f"gemm residual {m}x{n}x{k}", lambda dt: (lambda x, w, r: r + x @ w,
                                                          (_t(m, n, dtype=dt), _t(n, k, dtype=dt), _t(m, k, dtype=dt))),
                 False),
    ]


CHAIN = 1 << (12 if SMOKE else 26)
WORKLOADS = [
    Workload("pointwise chain 64M", lambda dt: (pointwise_chain, (_t(CHAIN, dtype=dt), _t(CHAIN, dtype=dt))), True),
    *_norm_workloads(8192, 4096), *_norm_workloads(32768, 1024), *_lm_head_loss(), *_reduction_workloads(),
    *_models(),
    *_gemm_workloads(),
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
    """One call as timed: the forward, or a training step (forward, backward) that returns its loss."""
    if not training:
        return lambda: fn(*args)

    def train():
        loss = fn(*args).float().pow(2).mean()
        loss.backward()
        return loss
    return train


def moved_bytes(args: tuple, out: object) -> int:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += [out] if isinstance(out, torch.Tensor) else []
    return sum(t.numel() * t.element_size() for t in tensors)


def kernel_seconds(fn: Callable, calls: int = KERNEL_CALLS) -> float | None:
    """The GPU's busy time per call (`_harness.cuda_kernel_seconds`). None on the CPU (smoke: Triton's interpreter
    has no device time)."""
    return _harness.cuda_kernel_seconds(fn, calls) if DEVICE == "cuda" else None


def compilers(fn: Callable, variants: list[str], mode: str | None = None) -> dict[str, Callable]:
    made = {"eager": lambda: fn, "inductor": lambda: torch.compile(fn, backend="inductor", mode=mode),
            "ember": lambda: ember.compile(fn, mode=mode, options=EMBER_OPTIONS)}
    return {v: made[v]() for v in variants}


def measure(name: str, dtype: str, repeats: int, variants: list[str], mode: str | None = None) -> dict:
    w = next(w for w in WORKLOADS if w.name == name)
    dt = getattr(torch, dtype)
    fn, args = w.make(dt)
    made = compilers(fn, variants, mode)
    fns = {k: step(c, args, w.training) for k, c in made.items()}
    plain = step(fn, args, w.training)
    with FallbackRecorder() as fallbacks:  # ember compiles at its first call
        cold = {label: seconds_per_call(fns[label], 1) - seconds_per_call(plain, 1) for label in fns
                if label != "eager"}
    result: dict = {"cold": cold, "fallbacks": dict(fallbacks.counts())}
    params = list(fn.parameters()) if isinstance(fn, nn.Module) and w.training else []  # the variants share them
    with torch.enable_grad() if w.training else torch.no_grad():
        want = _harness.outcome(plain, params)
        result["errors"] = {label: _harness.error(_harness.outcome(f, params), want) for label, f in fns.items()
                            if label != "eager"}
        result["kernels"] = {label: kernel_seconds(f) for label, f in fns.items()}
        if w.memory_bound:
            nbytes = moved_bytes(args, fn(*args))
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device=DEVICE)
            dst = torch.empty_like(src)
            fns["copy"] = lambda: dst.copy_(src)  # reads and writes nbytes / 2 each: nbytes moved
            result["bytes"] = nbytes
        result["times"] = timed(fns, repeats)
    return result


def overhead(repeats: int, variants: list[str], mode: str | None = None) -> dict[str, float]:
    """Seconds per call of a tiny graph (launch and wrapper costs, not kernels)."""
    x = torch.randn(8, device=DEVICE)
    fn = lambda t: (t + 1) * 2  # noqa: E731
    fns = compilers(fn, variants, mode)
    for f in fns.values():
        f(x)
    return timed({n: (lambda f=f: f(x)) for n, f in fns.items()}, repeats)


# ---------------------------------------------------------------------------------------------- the table


def run_child(args: list[str], timeout_s: float | None) -> dict:
    return _harness.run_child(__file__, [*args, *(["--smoke"] if SMOKE else [])], timeout_s)


def ratio(a: float | None, b: float | None, fmt: str = "{:.2f}") -> str:
    return fmt.format(a / b) if a and b else "n/a"


def launch_bound(r: dict) -> list[str]:
    """The variants whose wall time per call is LAUNCH_BOUND times their kernel time or more, with the factor."""
    out = []
    for label, k in r["kernels"].items():
        wall = r["times"][label]
        if k and wall >= LAUNCH_BOUND * k:
            out.append(f"{label} {wall / k:.1f}x")
    return out


def line(w: Workload, dtype: str, r: dict) -> str:
    t, k, cold = r["times"], r["kernels"], r["cold"]
    bandwidth = ""
    if "copy" in t and "ember" in t:
        gbs = r["bytes"] / t["ember"] / 1e9
        bandwidth = f"{gbs:.0f} GB/s = {t['copy'] / t['ember']:.0%} of copy"
    kernels = " / ".join("n/a" if k.get(v) is None else f"{k[v] * 1e6:.1f}" for v in VARIANTS if v in k)
    return (f"| {w.name} | {dtype} | {t['eager'] * 1e3:.3f} | {ratio(t['eager'], t.get('ember'), '{:.2f}x')} | "
            f"{ratio(t['eager'], t.get('inductor'), '{:.2f}x')} | **{ratio(t.get('inductor'), t.get('ember'))}** | "
            f"{kernels} | {ratio(k.get('inductor'), k.get('ember'))} | {', '.join(launch_bound(r)) or '-'} | "
            f"{bandwidth} | {seconds(cold.get('inductor'))} | {seconds(cold.get('ember'))} |")


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def last_words(e: Exception) -> str:
    """A failed child's error in one line: the last line of its stderr (the exception), else the first."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return (lines[-1] if len(lines) > 1 else lines[0] if lines else type(e).__name__)[:200].replace("|", "/")


def selected(name: str, only: set[str]) -> bool:
    return not only or name in only or any(name.startswith(o + " ") for o in only)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", default="")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="which of eager, inductor, ember (eager "
                                                                       "always runs: the speedups are over it)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds one workload's process may take")
    parser.add_argument("--no-overhead", action="store_true", help="skip the tiny graph's per-call overhead")
    parser.add_argument("--child", nargs="*", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--write", action="store_true", help="replace the GPU section of benchmarks/README.md")
    parser.add_argument("--mode", default=None, help="torch.compile mode for Inductor and ember both")
    opts = parser.parse_args()
    variants = [v for v in VARIANTS if v == "eager" or v in opts.variants.split(",")]
    if opts.child is not None:
        kind, *rest = opts.child
        result = overhead(opts.repeats, variants, opts.mode) if kind == "overhead" else \
            measure(*rest, opts.repeats, variants, opts.mode)
        print(json.dumps(result))
        return
    if not SMOKE and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py needs a CUDA device (or --smoke, which runs Triton's CPU interpreter)")
    only = {s.strip() for s in opts.only.split(",") if s.strip()}
    device = "CPU (smoke: Triton interpreter; no kernel times)" if SMOKE else torch.cuda.get_device_name()
    child = ["--repeats", str(opts.repeats), "--variants", ",".join(variants)]
    child += ["--mode", opts.mode] if opts.mode else []
    mode = f" --mode {opts.mode}" if opts.mode else ""
    out = [f"`python benchmarks/gpu.py --repeats {opts.repeats}{mode}` on {device}, torch {torch.__version__}: median "
           "wall time per call of back-to-back calls; \"inductor / ember\" above 1: ember faster; kernel µs: the "
           "GPU's kernel time per call (torch.profiler), eager / inductor / ember; launch-bound: wall time "
           f"{LAUNCH_BOUND}x the kernel time or more; cold compile seconds with fresh caches.", "",
           "| workload | dtype | eager ms | ember speedup | inductor speedup | inductor / ember | kernel µs "
           "| inductor / ember (kernels) | launch-bound | ember bandwidth | inductor cold s | ember cold s |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    rows = failed = bound = 0
    for w in WORKLOADS:
        if not selected(w.name, only):
            continue
        for dtype in opts.dtypes.split(","):
            rows += 1
            try:
                r = run_child(["measure", w.name, dtype, *child], opts.timeout)
            except RuntimeError as e:
                failed += 1
                out.append(f"| {w.name} | {dtype} | failed: {last_words(e)} |")
                print(out[-1], file=sys.stderr, flush=True)
                print(str(e)[-3000:], file=sys.stderr, flush=True)
                continue
            bound += bool(launch_bound(r))
            bad = _harness.wrong(r["errors"], dtype)
            failed += bool(bad)
            notes = [f"ember fell back: {', '.join(f'{c} {n}' for c, n in r['fallbacks'].items())}"] \
                if r["fallbacks"] else []
            notes += [f"WRONG against eager: {', '.join(bad)}"] if bad else []
            out.append(line(w, dtype, r) + "".join(f" {n}" for n in notes))
            print(out[-1], flush=True)
    if not opts.no_overhead:
        try:
            calls = run_child(["overhead", *child], opts.timeout)
            shown = ", ".join(f"{n} {t * 1e6:.1f} µs" for n, t in calls.items())
            out += ["", f"Per-call overhead, tiny graph: {shown}"]
        except RuntimeError as e:
            failed += 1
            out += ["", f"Per-call overhead: failed: {last_words(e)}"]
    print("\n".join(out))
    print(f"bench: {rows} rows, {failed} failed, {bound} launch-bound")
    if opts.write:
        _harness.write_section(Path(__file__).with_name("README.md"), "## GPU", "\n".join(out))
    if failed or not rows:
        sys.exit(1)


if __name__ == "__main__":
    main()
