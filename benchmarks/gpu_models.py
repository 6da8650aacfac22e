"""Whole models on a GPU: eager, torch.compile (Inductor) and ember side by side, the seven models of the first H200
run (/work/shared/gpu/models.jsonl; issue 29's table), random weights, and a small-batch decode step (`llama-decode`,
benchmarks/models.py's `DecodeStep`) under mode="reduce-overhead" for both compilers.

Each model runs in a fresh process with fresh compile caches: the variants are compiled there (cold compile: the
first call minus an eager call), then take turns in every repeat of a timed loop (median ms per call, synchronized
at the loop's ends), and the GPU's own kernel time per call is read from torch.profiler (`_harness`). With `--warm`
a second process compiles ember again from the disk caches the first left (warm compile). Before the timing, each
compiled variant's output (and a training step's gradients) is compared with eager's (`_harness.error`): a model
whose result is wrong is reported failed, as no speed of a wrong result is a speed; the JSON line also counts
ember's fallbacks by cause. One JSON line per model
goes to stdout (and to `--write FILE`), then a table: Inductor's time over ember's (above 1: ember is faster) by
wall time and by kernel time, and the compile times.

Usage: python benchmarks/gpu_models.py [--only resnet50,gpt2-infer] [--repeats 10] [--variants eager,inductor,ember]
                                       [--warm] [--profile 15] [--timeout 600] [--write results.jsonl]
       python benchmarks/gpu_models.py --smoke   (no GPU: tiny stand-ins on the CPU, eager and ember; checks that the
                                                  script runs, measures nothing worth reading)
Needs timm and transformers for the real models (the GPU machines have both). `--profile N` adds each variant's N
costliest GPU kernels per call (where the time goes, as /work/shared/gpu's profiles showed for inference; the
training models have none yet).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _harness

SMOKE = "--smoke" in sys.argv
if "--child" in sys.argv and "--keep-caches" not in sys.argv:  # cold compile: caches of its own
    _harness.use_fresh_caches("ember-gpu-models-")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEVICE = "cpu" if SMOKE else "cuda"
# name → (what it is, kind: infer-bf16 | train-fp32 | train-autocast)
MODELS = {
    "resnet50-infer": ("timm resnet50, 64x3x224x224, bf16 inference", "infer-bf16"),
    "vit-infer": ("timm vit_base_patch16_224, batch 64, bf16 inference", "infer-bf16"),
    "gpt2-infer": ("GPT-2 6 layers 768 wide, vocabulary 50257, 8x512 tokens, bf16 inference", "infer-bf16"),
    "llama-infer": ("Llama 4 layers 2048 wide, GQA 16/8, vocabulary 32000, 4x512, bf16 inference", "infer-bf16"),
    "gpt2-train": ("GPT-2 4 layers 768 wide, 8x256 tokens, fp32 training step", "train-fp32"),
    "resnet18-train": ("timm resnet18, 32x3x224x224, fp32 training step", "train-fp32"),
    "llama-train": ("Llama 4 layers 2048 wide, 4x512, training step under bf16 autocast", "train-autocast"),
    "llama-decode": ("Llama-style decode step, 4 layers 2048 wide, batch 4, one token against 512 cached, bf16, "
                     'mode="reduce-overhead" (CUDA graphs) for Inductor and ember', "decode-bf16"),
}


def build(name: str) -> tuple[torch.nn.Module, tuple]:
    """The model (float32, on the device) and its inputs."""
    if SMOKE:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from models import Block, SmallCNN

        if name == "llama-decode":
            from models import DecodeStep

            return DecodeStep(32, 2, 4, 2, 64, 100), decode_inputs(2, 2, 8, 2, 8, 100)
        cnn = "resnet" in name
        model, x = (SmallCNN(), torch.randn(2, 3, 16, 16)) if cnn else (Block(32, 4), torch.randn(2, 8, 32))
        return (MeanSquare(model) if MODELS[name][1].startswith("train") else model), (x,)
    if name == "llama-decode":
        from models import DecodeStep

        return DecodeStep(), decode_inputs(4, 4, 512, 8, 128, 32000)
    import timm
    import transformers

    ids = lambda b, t, v: torch.randint(0, v, (b, t), device=DEVICE)  # noqa: E731
    if name == "resnet50-infer":
        return timm.create_model("resnet50").eval(), (torch.randn(64, 3, 224, 224),)
    if name == "vit-infer":
        return timm.create_model("vit_base_patch16_224").eval(), (torch.randn(64, 3, 224, 224),)
    if name == "resnet18-train":
        return Loss(timm.create_model("resnet18"), torch.randint(0, 1000, (32,))), (torch.randn(32, 3, 224, 224),)
    if name.startswith("gpt2"):
        layers, (b, t) = (6, (8, 512)) if name == "gpt2-infer" else (4, (8, 256))
        config = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
        model = transformers.GPT2LMHeadModel(config)
        tokens = (ids(b, t, 50257),)
        return (Logits(model).eval(), tokens) if name == "gpt2-infer" else (Loss(model), tokens)
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                                      num_attention_heads=16, num_key_value_heads=8, vocab_size=32000,
                                      max_position_embeddings=1024, use_cache=False)
    model = transformers.LlamaForCausalLM(config)
    tokens = (ids(4, 512, 32000),)
    return (Logits(model).eval(), tokens) if name == "llama-infer" else (Loss(model), tokens)


def decode_inputs(batch: int, layers: int, cached: int, kv_heads: int, head_dim: int, vocab: int) -> tuple:
    """A decode step's token ids [batch, 1] and key and value caches [layers, batch, kv_heads, cached, head_dim]."""
    cache = (layers, batch, kv_heads, cached, head_dim)
    return torch.randint(0, vocab, (batch, 1)), torch.randn(cache), torch.randn(cache)


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


class MeanSquare(torch.nn.Module):
    """A smoke stand-in's scalar loss (the real models' is their own)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).float().pow(2).mean()


class Loss(torch.nn.Module):
    """A language model's loss on its own tokens, or a classifier's cross entropy against `labels`."""

    def __init__(self, model, labels=None):
        super().__init__()
        self.model = model
        self.register_buffer("labels", labels)

    def forward(self, x):
        if self.labels is not None:
            return F.cross_entropy(self.model(x), self.labels)
        return self.model(input_ids=x, labels=x).loss


def step(fn: Callable, model: torch.nn.Module, inputs: tuple, kind: str) -> Callable:
    """One call as timed: inference under no_grad (bf16), or forward and backward (autocast when asked)."""
    if kind in ("infer-bf16", "decode-bf16"):
        def infer():
            with torch.no_grad():
                return fn(*inputs)
        return infer

    def train():
        model.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, torch.bfloat16, enabled=kind == "train-autocast"):
            loss = fn(*inputs)
        loss.backward()
        return loss
    return train


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def measure(name: str, variants: list[str], repeats: int, profile: int = 0) -> dict:
    import ember
    from ember_core.testing import FallbackRecorder

    torch.manual_seed(0)
    kind = MODELS[name][1]
    model, inputs = build(name)
    low = kind in ("infer-bf16", "decode-bf16") and not SMOKE
    model = model.to(DEVICE, torch.bfloat16 if low else torch.float32)
    inputs = tuple(x.to(DEVICE, torch.bfloat16) if x.is_floating_point() and low else x.to(DEVICE) for x in inputs)
    mode = "reduce-overhead" if kind == "decode-bf16" else None
    makers = {"eager": lambda: model, "inductor": lambda: torch.compile(model, backend="inductor", mode=mode),
              "ember": lambda: ember.compile(model, mode=mode)}
    calls = {v: step(makers[v](), model, inputs, kind) for v in variants}
    plain = step(model, model, inputs, kind)
    cold = {}
    with FallbackRecorder() as fallbacks:  # ember compiles at its first call
        for v in variants:
            if v != "eager":
                sync()
                start = time.perf_counter()
                calls[v]()
                sync()
                eager = _harness.first_call_s(lambda: (plain(), sync()))
                cold[v] = time.perf_counter() - start - eager
    params = list(model.parameters()) if kind.startswith("train") else []  # the variants share the model's
    want = _harness.outcome(plain, params)
    errors = {v: _harness.error(_harness.outcome(c, params), want) for v, c in calls.items() if v != "eager"}
    wall = _harness.timed(calls, (), repeats, loop_s=0.5)
    kernels = {v: _harness.cuda_kernel_seconds(c, 5) for v, c in calls.items()} if DEVICE == "cuda" else {}
    top = {v: _harness.cuda_kernel_table(c, 3, profile) for v, c in calls.items()} if DEVICE == "cuda" and profile \
        else {}
    return {"model": name, "what": MODELS[name][0], "device": torch.cuda.get_device_name() if DEVICE == "cuda" else
            "cpu (smoke)", "torch": torch.__version__, "ms": {v: s * 1e3 for v, s in wall.items()},
            "kernel_ms": {v: s * 1e3 for v, s in kernels.items()}, "cold_s": cold, "errors": errors,
            "fallbacks": dict(fallbacks.counts()),
            "wrong": _harness.wrong(errors, "bfloat16" if low or kind == "train-autocast" else "float32"),
            **({"top_kernels": top} if top else {})}


def child(args: argparse.Namespace) -> None:
    result = measure(args.only, args.variants.split(","), args.repeats, args.profile)
    if "--keep-caches" in sys.argv:
        result = {"model": args.only, "warm_s": result["cold_s"].get("ember")}
    print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="resnet50-infer,gpt2-infer" if SMOKE else ",".join(MODELS))
    parser.add_argument("--variants", default="eager,ember" if SMOKE else "eager,inductor,ember")
    parser.add_argument("--repeats", type=int, default=2 if SMOKE else 10)
    parser.add_argument("--warm", action="store_true", help="also time ember's warm compile (a second process)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--write", help="append the JSON lines to this file")
    parser.add_argument("--profile", type=int, default=0, help="also each variant's N costliest GPU kernels per call "
                        "(`top_kernels` in the JSON line, a table after the summary)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--keep-caches", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    rows, failed = [], 0
    for name in args.only.split(","):
        flags = ["--only", name, "--variants", args.variants, "--repeats", str(args.repeats),
                 "--profile", str(args.profile), *(["--smoke"] if SMOKE else [])]
        try:
            row = _harness.run_child(__file__, flags, args.timeout)
            if args.warm:
                cache = os.environ.get("EMBER_CACHE_DIR")
                row["warm_s"] = _warm(flags, args.timeout, cache)
        except RuntimeError as e:
            row, failed = {"model": name, "failed": str(e).splitlines()[0]}, failed + 1
        if row.get("wrong"):  # timed, but a speed of a wrong result is no speed
            row, failed = {**row, "failed": f"WRONG against eager: {', '.join(row['wrong'])}"}, failed + 1
        print(json.dumps(row), flush=True)
        rows.append(row)
        if args.write:
            with open(args.write, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(table(rows))
    for row in rows:
        for variant, kernels in row.get("top_kernels", {}).items():
            print(f"\n{row['model']} {variant}: ms per call, launches per call")
            for k in kernels:
                print(f"  {k['ms']:8.3f}  {k['launches']:6.1f}  {k['kernel']}")
    sys.exit(1 if failed else 0)


def _warm(flags: list[str], timeout: float, cache: str | None) -> float | None:
    """ember's compile time in a second process that finds the first one's disk caches (same EMBER_CACHE_DIR)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ember-gpu-models-warm-") as root:
        os.environ["EMBER_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"] = f"{root}/ember", f"{root}/triton"
        try:
            ember_only = [*flags[:2], "--variants", "eager,ember", *flags[4:], "--keep-caches"]
            _harness.run_child(__file__, ember_only, timeout)  # fills the caches
            return _harness.run_child(__file__, ember_only, timeout)["warm_s"]
        finally:
            os.environ.pop("TRITON_CACHE_DIR")
            if cache is None:
                os.environ.pop("EMBER_CACHE_DIR")
            else:
                os.environ["EMBER_CACHE_DIR"] = cache


def table(rows: list[dict]) -> str:
    lines = ["| model | eager ms | inductor ms | ember ms | inductor/ember wall | inductor/ember kernels | "
             "cold s inductor / ember | warm s ember |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = []
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['model']} | failed: {r['failed'][:80]} |||||||")
            continue
        ms, k, cold = r["ms"], r.get("kernel_ms", {}), r["cold_s"]
        ratio = ms["inductor"] / ms["ember"] if "inductor" in ms else None
        kratio = k["inductor"] / k["ember"] if "inductor" in k else None
        ratios += [ratio] if ratio else []
        fmt = lambda x, f="{:.2f}": f.format(x) if x is not None else "n/a"  # noqa: E731
        lines.append(f"| {r['model']} | {fmt(ms.get('eager'))} | {fmt(ms.get('inductor'))} | {fmt(ms.get('ember'))} | "
                     f"{fmt(ratio)} | {fmt(kratio)} | {fmt(cold.get('inductor'), '{:.1f}')} / "
                     f"{fmt(cold.get('ember'), '{:.1f}')} | {fmt(r.get('warm_s'), '{:.1f}')} |")
    if ratios:
        lines.append(f"\ngeomean inductor/ember (wall): {statistics.geometric_mean(ratios):.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
