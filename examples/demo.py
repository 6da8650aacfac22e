"""ember's demo: a small transformer block compiled by ember next to eager PyTorch and torch.compile (Inductor).

It checks ember against eager (outputs and gradients), times the three side by side (cold compile time, fresh
caches for both compilers, and time per call, inference and a training step), says in a few lines what each stage
of ember did, lists the kernels it fused, and writes the compile report (`EMBER_REPORT`) to open in a browser.

    ./dev demo                      # or: python examples/demo.py [--quick]
"""

from __future__ import annotations

import argparse
import atexit
import copy
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("EMBER_REPORT", os.path.join(tempfile.gettempdir(), "ember-demo-report"))
# Cold compiles on both sides, every run: fresh disk caches for ember and Inductor.
_CACHES = tempfile.mkdtemp(prefix="ember-demo-")
os.environ["EMBER_CACHE_DIR"] = os.path.join(_CACHES, "ember")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHES, "inductor")
atexit.register(shutil.rmtree, _CACHES, ignore_errors=True)

import ember  # noqa: E402 - after EMBER_REPORT is set: ember reads it when it starts
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


class Block(nn.Module):
    def __init__(self, d=128, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def per_call(fns: dict[str, Callable[[], object]], seconds: float, repeats: int = 7) -> dict[str, float]:
    """Median seconds of one call of each function. The functions take turns inside every repeat (a batch of calls
    of about `seconds` / repeats each), so a machine that drifts slows all of them alike, not the last one measured."""
    batch = {}
    for name, fn in fns.items():
        fn()  # warm: a compiled function's first call of a new kind compiles
        start = time.perf_counter()
        fn()
        batch[name] = max(1, int(seconds / repeats / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(batch[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / batch[name])
    return {name: statistics.median(s) for name, s in samples.items()}


def training_step(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def step():
        model(x).pow(2).mean().backward()

    return step


def check_against_eager(model: nn.Module, compiled: nn.Module, twin: nn.Module, x: torch.Tensor) -> None:
    torch.testing.assert_close(compiled(x), model(x))
    for m in (model, twin):
        m.zero_grad(set_to_none=True)
    model(x).pow(2).mean().backward()
    compiled(x).pow(2).mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)


def stages(events) -> list[str]:
    """What each stage did, a line each, from the events of the first compile."""
    kinds = [e.kind for e in events]
    captured = [e.graph for e in events if e.kind == "graph_captured"]
    lines = [f"capture    {len(captured)} graph(s), {sum(len(g.nodes) for g in captured)} ATen nodes "
             f"({', '.join(g.name for g in captured)})"]
    for e in events:
        if e.kind == "joint_traced":
            lines.append(f"autograd   joint graph of {len(e.get('joint').graph.nodes)} nodes (forward + backward)")
        if e.kind == "partitioned":
            lines.append(f"partition  {len(e.get('forward').nodes)} forward / {len(e.get('backward').nodes)} "
                         f"backward nodes, {len(e.get('saved'))} values saved for the backward")
    plans = [e for e in events if e.kind == "kernels_planned"]
    kernels = sum(len(re.findall(r"^  kernel ", e.source or "", re.M)) for e in plans)
    externs = sum(len(re.findall(r"^  extern ", e.source or "", re.M)) for e in plans)
    lines.append(f"lowering   {len(plans)} plan(s): {kernels} fused loop kernels, {externs} ATen calls (matmuls, "
                 "attention)")
    for e in events:
        if e.kind == "kernels_generated":
            lines.append(f"codegen    {e.message}")
    hits = kinds.count("build_cache_hit")
    lines.append(f"build      {kinds.count('build_cache_miss')} built, {hits} from the disk cache")
    return lines


def fused_kernels(events, limit: int = 8) -> list[str]:
    """`kernel NAME  <- the ATen ops it runs`, forward then backward, from the kernel plans and the graphs."""
    ops = {}  # value name → its op's short name, per graph name
    for e in events:
        if e.kind == "partitioned":
            for g in (e.get("forward"), e.get("backward")):
                ops[g.name] = {o: n.op.split(".")[1] if n.op.startswith("aten.") else n.op
                               for n in g.nodes for o in n.outputs}
    out = []
    for e in events:
        if e.kind != "kernels_planned":
            continue
        names = ops.get(e.get("graph"), {})
        half = "backward" if "backward" in str(e.get("graph")) else "forward"
        for kernel, origins in re.findall(r"^  kernel (\S+?)\[.*?\]:\s*# from (.*)$", e.source or "", re.M):
            runs = dict.fromkeys(names.get(o.strip(), o.strip()) for o in origins.split(","))
            out.append(f"{half:8} {kernel:22} <- {', '.join(runs)}")
    return out[:limit] + ([f"... and {len(out) - limit} more"] if len(out) > limit else [])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="shorter timings, no torch.compile")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, x = Block(), torch.randn(8, 64, 128)
    budget = 0.6 if args.quick else 3.0

    twin = copy.deepcopy(model)
    start = time.perf_counter()
    with ember.record_events() as rec:
        compiled = ember.compile(twin)
        check_against_eager(model, compiled, twin, x)
    ember_compile = time.perf_counter() - start
    print("ember matches eager: outputs and every parameter's gradient (forward and backward)\n")

    rows = [("eager", model, None)]
    if not args.quick:
        inductor_twin = copy.deepcopy(model)
        inductor = torch.compile(inductor_twin)
        start = time.perf_counter()
        inductor(x).pow(2).mean().backward()
        rows.append(("torch.compile", inductor, time.perf_counter() - start))
    rows.append(("ember.compile", compiled, ember_compile))

    with torch.no_grad():
        infer = per_call({name: (lambda m=m: m(x)) for name, m, _ in rows}, budget)
    train = per_call({name: training_step(m, x) for name, m, _ in rows}, budget)
    print(f"{'':14} {'compile s':>10} {'inference ms':>13} {'train step ms':>14}   (medians, taking turns)")
    for name, _, compile_s in rows:
        speed = f"  ({infer['eager'] / infer[name]:.2f}x, {train['eager'] / train[name]:.2f}x eager)" \
            if name != "eager" else ""
        print(f"{name:14} {compile_s or 0:>10.2f} {infer[name] * 1e3:>13.3f} {train[name] * 1e3:>14.3f}{speed}")

    print("\nwhat each stage did:")
    for line in stages(rec.events):
        print("  " + line)
    print("\nkernels ember fused (loop IR), with the graph ops each one runs:")
    for line in fused_kernels(rec.events):
        print("  " + line)
    report = os.environ.get("EMBER_REPORT")
    pages = sorted(p for p in _report_pages(report)) if report else []
    if pages:
        print(f"\ncompile report (every stage's text, diagrams, kernels): {pages[-1]}")
        # the interpreter running this demo (the demo session's venv, whose `ember` script is on no user's PATH)
        command = shlex.join([sys.executable, "-m", "ember", "report", report, "--open"])
        print(f"  open it in a browser, or run: {command}")


def _report_pages(folder: str):
    try:
        return [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".html")]
    except OSError:
        return []


if __name__ == "__main__":
    main()
