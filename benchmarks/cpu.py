"""CPU workloads side by side in one run: eager, torch.compile (Inductor), ember; 1 and 2 threads.

Reports the median time per call (ratios to eager and to Inductor), cold compile times with fresh caches, and the
pointwise chain's bandwidth against a plain tensor copy measured in the same run (the machine's practical limit).
Usage: python benchmarks/cpu.py [--threads 1,2] [--repeats 7] [--only NAME,...] [--write]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Fresh caches for cold compile times: set before torch/ember import them.
_CACHE = tempfile.mkdtemp(prefix="ember-bench-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("EMBER_CACHE_DIR", os.path.join(_CACHE, "ember"))
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import ember  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


@dataclass
class Workload:
    name: str
    make: Callable[[], tuple[Callable, tuple]]  # → (function or module, inputs)
    memory_bound: bool
    training: bool = False


def pointwise_chain(x, y):
    return ((x * 1.5 + y).sigmoid() * x - y).relu()


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class GeluMLP(nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def mlp_train_step_model():
    return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512))


WORKLOADS = [
    Workload("pointwise chain 4M", lambda: (pointwise_chain, (torch.randn(4 << 20), torch.randn(4 << 20))), True),
    Workload("softmax 4096x1024", lambda: (lambda x: torch.softmax(x, -1), (torch.randn(4096, 1024),)), True),
    Workload("layernorm 4096x1024", lambda: (nn.LayerNorm(1024), (torch.randn(4096, 1024),)), True),
    Workload("rmsnorm 4096x1024", lambda: (rmsnorm, (torch.randn(4096, 1024), torch.randn(1024))), True),
    Workload("gelu mlp 256x512", lambda: (GeluMLP(), (torch.randn(256, 512),)), False),
    Workload("transformer block 8x128x256", lambda: (Block(), (torch.randn(8, 128, 256),)), False),
    Workload("small cnn 16x3x32x32", lambda: (SmallCNN().eval(), (torch.randn(16, 3, 32, 32),)), False),
    Workload("mlp train step 256x512", lambda: (mlp_train_step_model(), (torch.randn(256, 512),)), False, True),
]


def step_fn(fn: Callable, training: bool) -> Callable:
    if not training:
        return fn

    def step(*args):
        fn(*args).pow(2).mean().backward()

    return step


def variants(w: Workload) -> dict[str, tuple[Callable, tuple]]:
    fn, args = w.make()
    made = {"eager": (fn, args)}
    for label, wrap in (("inductor", lambda f: torch.compile(f, backend="inductor")), ("ember", ember.compile)):
        twin = copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn
        made[label] = (wrap(twin), args)
    return made


def first_call_s(fn: Callable, args: tuple) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def timed(fns: dict[str, Callable], args: tuple, repeats: int) -> dict[str, float]:
    """Median seconds per call; variants take turns inside each repeat."""
    calls = {}
    for name, fn in fns.items():  # size each loop to about 0.2 s
        start = time.perf_counter()
        fn(*args)
        calls[name] = max(1, int(0.2 / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn(*args)
            samples[name].append((time.perf_counter() - start) / calls[name])
    return {n: statistics.median(s) for n, s in samples.items()}


def copy_bandwidth_gbs(repeats: int) -> float:
    """A plain copy moving as many bytes as the pointwise chain (48 MB), so neither fits in the cache."""
    src, dst = torch.randn(6 << 20), torch.empty(6 << 20)
    t = timed({"copy": lambda: dst.copy_(src)}, (), repeats)["copy"]
    return 2 * src.numel() * 4 / t / 1e9


def run(threads: int, workloads: list[Workload], repeats: int, compile_times: dict) -> list[str]:
    torch.set_num_threads(threads)
    rows, ratios, memory_ratios = [], [], []
    copy_gbs = copy_bandwidth_gbs(repeats)
    for w in workloads:
        made = variants(w)
        fns = {name: step_fn(fn, w.training) for name, (fn, _) in made.items()}
        args = made["eager"][1]
        ctx = torch.enable_grad() if w.training else torch.no_grad()
        with ctx:
            for name in ("inductor", "ember"):
                cold = first_call_s(fns[name], args) - first_call_s(fns["eager"], args)
                compile_times.setdefault((w.name, name), cold)
            t = timed(fns, args, repeats)
        ratio = t["inductor"] / t["ember"]
        ratios.append(ratio)
        if w.memory_bound:
            memory_ratios.append(ratio)
        extra = ""
        if w.name.startswith("pointwise"):
            gbs = 4 * args[0].numel() * 3 / t["ember"] / 1e9  # two reads and one write of float32
            extra = f"{gbs:.1f} GB/s = {gbs / copy_gbs:.0%} of copy"
        rows.append(f"| {threads} | {w.name} | {t['eager'] * 1e3:.3f} | {t['eager'] / t['ember']:.2f}x | "
                    f"{t['eager'] / t['inductor']:.2f}x | {ratio:.2f} | {extra} |")
    geo = statistics.geometric_mean(ratios)
    rows.append(f"| {threads} | geomean (all) / memory-bound | | | | {geo:.2f} / "
                f"{statistics.geometric_mean(memory_ratios) if memory_ratios else float('nan'):.2f} | "
                f"copy {copy_gbs:.1f} GB/s |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", default="")
    parser.add_argument("--write", action="store_true", help="replace the CPU section of benchmarks/README.md")
    args = parser.parse_args()
    chosen = [w for w in WORKLOADS if not args.only or any(o in w.name for o in args.only.split(","))]
    compile_times: dict = {}
    lines = [
        f"`python benchmarks/cpu.py` ({os.cpu_count()} cores, torch {torch.__version__}, ember {ember.__version__}, "
        f"codegen {_cpu_codegen()}): median time per call, speedup over eager; "
        "the last column but one is Inductor's time over ember's (above 1: ember faster).",
        "",
        "| threads | workload | eager ms | ember speedup | inductor speedup | inductor / ember | bandwidth |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for threads in [int(t) for t in args.threads.split(",")]:
        lines += run(threads, chosen, args.repeats, compile_times)
        print("\n".join(lines[-len(chosen) - 1:]), flush=True)
    lines += ["", "Cold compile time (first call minus an eager call, fresh caches), seconds:", "",
              "| workload | inductor | ember | ember / inductor |", "|---|---:|---:|---:|"]
    for w in chosen:
        ind, emb = compile_times[(w.name, "inductor")], compile_times[(w.name, "ember")]
        lines.append(f"| {w.name} | {ind:.2f} | {emb:.2f} | {emb / ind:.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(Path(__file__).with_name("README.md"), "## CPU", text)


def _cpu_codegen() -> str:
    from ember_core import get_plugin_manager

    return get_plugin_manager().registry.find("codegen", device="cpu").name


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace (or append) the section under `heading`, leaving the other sections alone."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(f"\n{heading}\n")
    section = f"\n{heading}\n\n{body}\n"
    if start == -1:
        text = text.rstrip("\n") + "\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end:] if end != -1 else "")
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
