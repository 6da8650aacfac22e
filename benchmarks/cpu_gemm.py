"""codegen-cpp's matmul choice (option `cpp.gemm`, `ember_codegen_cpp._gemm`): ATen's float32 GEMM (MKL) against
oneDNN's matmul (`mkldnn._linear_pointwise`) on this CPU.

`python benchmarks/cpu_gemm.py ops [--threads 2]`: each linear layer of the zoo's transformers in the three products
its training step makes (forward `x @ w.T`, with and without a bias, input gradient `dy @ w`, weight gradient
`dy.T @ x`), as the graph lays them out; median microseconds over interleaved repeats of both calls.

`python benchmarks/cpu_gemm.py steps [--models gelu_mlp,vit_tiny_patch16_224] [--threads 2]`: zoo training steps
compiled twice in one process, `cpp.gemm="aten"` and `"measure"` (the default), timed alternately; the ratio is
aten's time over measure's (above 1: the choice made the step faster). Needs timm and transformers for the zoo's
models (`pip install -r benchmarks/requirements.txt`).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

# (tokens, in, out) of the zoo's linear layers: vit_tiny (197 tokens, width 192), bert and gpt2 (2x128 tokens,
# width 256, gpt2's 8192-word head), t5-small (2x64 tokens, width 512)
LAYERS = [(197, 192, 576), (197, 192, 768), (197, 768, 192), (256, 256, 768), (256, 256, 1024), (256, 1024, 256),
          (256, 256, 8192), (128, 512, 512), (128, 512, 2048), (128, 2048, 512)]


def interleaved(calls: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each call, the calls alternating within every repeat."""
    for fn in calls.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def ops(repeats: int) -> None:
    linear = torch.ops.mkldnn._linear_pointwise.default
    print("| tokens x in x out | product | ATen us | oneDNN us | ATen / oneDNN |\n|---|---|---:|---:|---:|")
    for m, k, n in LAYERS:
        x, w, bias, dy = torch.randn(m, k), torch.randn(n, k), torch.randn(n), torch.randn(m, n)
        for name, a, b, c in (("x @ w.T + bias", x, w.t(), bias), ("x @ w.T", x, w.t(), None),
                              ("dy @ w", dy, w, None), ("dy.T @ x", dy.t(), x, None)):
            aten = (lambda a=a, b=b: torch.mm(a, b)) if c is None else (lambda a=a, b=b, c=c: torch.addmm(c, a, b))
            t = interleaved({"aten": aten, "onednn": lambda a=a, b=b, c=c: linear(a, b.t(), c, "none", [], "")},
                            repeats)
            print(f"| {m}x{k}x{n} | {name} | {t['aten'] * 1e6:.0f} | {t['onednn'] * 1e6:.0f} | "
                  f"{t['aten'] / t['onednn']:.2f} |", flush=True)


def steps(models: list[str], repeats: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import ember
    import zoo

    print("| model | training step, cpp.gemm=aten ms | measure ms | aten / measure | products on oneDNN |\n"
          "|---|---:|---:|---:|---:|")
    for name in models:
        torch.manual_seed(0)
        fn, args, kwargs = zoo.BY_NAME[name].build()
        fn.train(True)
        variants = {how: zoo.Variant(ember.compile(copy.deepcopy(fn), options={"cpp.gemm": how}), args, kwargs, True)
                    for how in ("aten", "measure")}
        for v in variants.values():
            v.step()  # compiled (and, under measure, its products timed) here
        with torch.profiler.profile() as prof:
            variants["measure"].step()
        calls = {e.key: e.count for e in prof.key_averages()}
        onednn = calls.get("mkldnn::_linear_pointwise", 0)
        t = interleaved({how: v.step for how, v in variants.items()}, repeats)
        print(f"| {name} | {t['aten'] * 1e3:.2f} | {t['measure'] * 1e3:.2f} | {t['aten'] / t['measure']:.3f} | "
              f"{onednn} of {onednn + calls.get('aten::mm', 0) + calls.get('aten::addmm', 0)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("ops", "steps"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--models", default="gelu_mlp,attention_block,vit_tiny_patch16_224,bert,gpt2,t5")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    print(f"{opts.threads} threads, torch {torch.__version__}")
    if opts.what == "ops":
        ops(opts.repeats)
    else:
        steps([m for m in opts.models.split(",") if m], opts.repeats)


if __name__ == "__main__":
    main()
