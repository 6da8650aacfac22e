"""Real models compiled by ember against eager: `./dev gpu`'s models step.

    python tools/gpu_models.py [--device cuda] [--tiny] [--only NAME,...]

Each case is a model with random weights (timm's resnet18, transformers' GPT-2 and Llama built from configs; where
timm or transformers is not importable, the models of tests/models.py stand in) run three ways:
- `infer-bf16`: inference in bfloat16 under no_grad; eager's and ember's outputs against the float32 model's;
- `train-fp32`: one forward and backward in float32; the loss and every gradient against the float64 model's;
- `train-autocast`: the same under `torch.autocast(device, bfloat16)`, against float64 without autocast.
A case passes when ember's error is at most 3x eager's plus a floor (the accuracy contract of docs/architecture.md:
fusing may make ember more accurate than eager, never much less). Each case prints one JSON line (errors, cold
compile seconds, ms per call, ember's codegens and fallbacks); the last line is `models: N ok, M failed`, and a failed
case exits 1. `--tiny`: three toy cases for a CPU dry run, not timed (Triton's interpreter is slow).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from ember_core.testing import cuda_context_lost
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

FLOORS = {"infer-bf16": 1e-3, "train-fp32": 1e-6, "train-autocast": 1e-3}  # relative error allowed on top of 3x


@dataclasses.dataclass
class Case:
    name: str
    kind: str  # infer-bf16 | train-fp32 | train-autocast
    source: str  # where the model comes from
    make: Callable[[], tuple[nn.Module, tuple]]  # a float32 model on the device, and its inputs


class LossOf(nn.Module):
    """A language model's loss on its own tokens, or a classifier's cross entropy: one tensor out."""

    def __init__(self, model: nn.Module, labels: torch.Tensor | None = None):
        super().__init__()
        self.model, self.labels = model, labels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.labels is not None:
            return F.cross_entropy(self.model(x).float(), self.labels)
        return self.model(input_ids=x, labels=x).loss


class LogitsOf(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=x).logits


# ---------------------------------------------------------------------------------------------- the models


class TinyGPTLoss(nn.Module):
    """tests/models.py's TinyGPT, trained on its own tokens."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx, idx)


def toy_cases(device: str) -> list[Case]:
    """tests/models.py at toy sizes: the dry run's models, and the stand-ins where timm or transformers is missing."""
    from models import Block, SmallCNN, TinyGPT

    labels = torch.randint(0, 10, (2,), device=device)
    tokens = lambda: torch.randint(0, 64, (2, 16), device=device)  # noqa: E731
    src = "tests/models.py"
    return [
        Case("SmallCNN infer-bf16", "infer-bf16", src,
             lambda: (SmallCNN().eval().to(device), (torch.randn(2, 3, 8, 8, device=device),))),
        Case("SmallCNN train-fp32", "train-fp32", src,
             lambda: (LossOf(SmallCNN(), labels).to(device), (torch.randn(2, 3, 8, 8, device=device),))),
        Case("Block infer-bf16", "infer-bf16", src,
             lambda: (Block().eval().to(device), (torch.randn(2, 8, 32, device=device),))),
        Case("TinyGPT train-fp32", "train-fp32", src,
             lambda: (TinyGPTLoss(TinyGPT(n_blocks=1)).to(device), (tokens(),))),
        Case("TinyGPT train-autocast", "train-autocast", src,
             lambda: (TinyGPTLoss(TinyGPT(n_blocks=1)).to(device), (tokens(),))),
    ]


def timm_cases(device: str) -> list[Case]:
    import timm

    labels = torch.randint(0, 1000, (16,), device=device)
    make = lambda: timm.create_model("resnet18", pretrained=False)  # noqa: E731
    return [
        Case("resnet18 infer-bf16", "infer-bf16", "timm", lambda: (make().eval().to(device),
                                                                   (torch.randn(32, 3, 224, 224, device=device),))),
        Case("resnet18 train-fp32", "train-fp32", "timm", lambda: (LossOf(make(), labels).to(device),
                                                                   (torch.randn(16, 3, 224, 224, device=device),))),
    ]


def transformers_cases(device: str) -> list[Case]:
    import transformers

    vocab = 8192
    gpt2 = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=vocab, n_positions=256,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                                   bos_token_id=0, eos_token_id=0)
    llama = transformers.LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                                     num_attention_heads=8, num_key_value_heads=4, vocab_size=vocab,
                                     max_position_embeddings=256, use_cache=False)
    gpt2_model = lambda: transformers.GPT2LMHeadModel(gpt2)  # noqa: E731
    llama_model = lambda: transformers.LlamaForCausalLM(llama)  # noqa: E731
    ids = lambda b, t: torch.randint(0, vocab, (b, t), device=device)  # noqa: E731
    src = "transformers, from a config"
    return [
        Case("gpt2 infer-bf16", "infer-bf16", src, lambda: (LogitsOf(gpt2_model()).eval().to(device), (ids(8, 256),))),
        Case("gpt2 train-fp32", "train-fp32", src, lambda: (LossOf(gpt2_model()).to(device), (ids(4, 128),))),
        Case("llama infer-bf16", "infer-bf16", src,
             lambda: (LogitsOf(llama_model()).eval().to(device), (ids(8, 256),))),
        Case("llama train-autocast", "train-autocast", src, lambda: (LossOf(llama_model()).to(device), (ids(4, 128),))),
    ]


def zoo(device: str, tiny: bool) -> list[Case]:
    """The cases to run: toy models for `tiny`; else timm's and transformers' models, each library's share replaced
    by its tests/models.py stand-ins when it is not importable (said in the case's `source`)."""
    toys = {c.name: c for c in toy_cases(device)}
    if tiny:
        return [toys["SmallCNN infer-bf16"], toys["TinyGPT train-fp32"], toys["TinyGPT train-autocast"]]
    cases = []
    for library, build, stand_ins in (("timm", timm_cases, ["SmallCNN infer-bf16", "SmallCNN train-fp32"]),
                                      ("transformers", transformers_cases,
                                       ["Block infer-bf16", "TinyGPT train-fp32", "TinyGPT train-autocast"])):
        try:
            cases += build(device)
        except Exception as e:  # noqa: BLE001 - missing, or broken on import (a torchvision built for another torch)
            why = f"{type(e).__name__}: {e}".splitlines()[0][:120]
            for name in stand_ins:
                cases.append(dataclasses.replace(toys[name], source=f"tests/models.py (no {library}: {why})"))
    return cases


# ---------------------------------------------------------------------------------------------- running


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rel_err(values: list[torch.Tensor], refs: list[torch.Tensor]) -> float:
    """Relative RMS error of all values together against their references."""
    num = sum(float((v.double() - r.double()).pow(2).sum()) for v, r in zip(values, refs))
    den = sum(float(r.double().pow(2).sum()) for r in refs)
    return (num / max(den, 1e-300)) ** 0.5


def cast_inputs(inputs: tuple, dtype: torch.dtype) -> tuple:
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


def run_once(model: nn.Module, inputs: tuple, kind: str, device: str) -> list[torch.Tensor]:
    """The outputs a case compares: the output (inference), or the loss and every gradient (training)."""
    if kind == "infer-bf16":
        with torch.no_grad():
            return [model(*inputs).float()]
    model.zero_grad(set_to_none=True)
    autocast = torch.autocast(device.split(":")[0], torch.bfloat16, enabled=kind == "train-autocast")
    with autocast:
        loss = model(*inputs)
    loss.backward()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters() if p.requires_grad]
    return [loss.detach(), *grads]


def ms_per_call(model: nn.Module, inputs: tuple, kind: str, device: str, calls: int = 5) -> float | None:
    if not calls:
        return None
    times = []
    for _ in range(calls):
        sync(device)
        start = time.perf_counter()
        run_once(model, inputs, kind, device)
        sync(device)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 3)


def run_case(case: Case, device: str, calls: int = 5) -> dict:
    import ember

    torch.manual_seed(0)
    model, inputs = case.make()
    if case.kind == "infer-bf16":
        reference = run_once(model, inputs, case.kind, device)
        model, inputs = model.to(torch.bfloat16), cast_inputs(inputs, torch.bfloat16)
    else:
        reference = run_once(copy.deepcopy(model).double(), cast_inputs(inputs, torch.float64), case.kind, device)
    eager_model, ember_model = copy.deepcopy(model), copy.deepcopy(model)
    eager = run_once(eager_model, inputs, case.kind, device)
    compiled = ember.compile(ember_model)
    with ember.record_events() as rec:
        sync(device)
        start = time.perf_counter()
        ours = run_once(compiled, inputs, case.kind, device)
        sync(device)
        cold = time.perf_counter() - start
    eager_err, ember_err = rel_err(eager, reference), rel_err(ours, reference)
    allowed = 3 * eager_err + FLOORS[case.kind]
    return {"case": case.name, "source": case.source, "device": device, "ok": ember_err <= allowed,
            "eager_err": eager_err, "ember_err": ember_err, "allowed": allowed, "ember_cold_s": round(cold, 2),
            "ms": {"eager": ms_per_call(eager_model, inputs, case.kind, device, calls),
                   "ember": ms_per_call(compiled, inputs, case.kind, device, calls)},
            "codegens": sorted({str(e.get("codegen")) for e in rec.events if e.kind == "graph_compiled"}),
            "graphs": len(rec.kinds("graph_captured")),
            "fallbacks": sorted({e.message[:200] for e in rec.kinds("fallback")})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (a CPU dry run)")
    parser.add_argument("--only", default="", help="case names, comma-separated (default: all)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("models: no CUDA device", file=sys.stderr)
        return 1
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    cases = [c for c in zoo(args.device, args.tiny) if not only or c.name in only]
    ok = failed = 0
    for k, case in enumerate(cases):
        try:
            result = run_case(case, args.device, 0 if args.tiny else 5)
        except Exception as e:  # noqa: BLE001 - one model's failure is reported and the next one runs
            traceback.print_exc()
            result = {"case": case.name, "source": case.source, "ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
            if cuda_context_lost(e) and cases[k + 1:]:
                print(json.dumps(result), flush=True)
                more_ok, more_failed = in_fresh_process(argv, [c.name for c in cases[k + 1:]])
                return report(ok + more_ok, failed + 1 + more_failed)
        ok, failed = ok + result["ok"], failed + (not result["ok"])
        print(json.dumps(result), flush=True)
    return report(ok, failed)


def report(ok: int, failed: int) -> int:
    print(f"models: {ok} ok, {failed} failed", flush=True)
    return 1 if failed or not ok else 0


def in_fresh_process(argv: list[str] | None, names: list[str]) -> tuple[int, int]:
    """Runs the cases `names` in a new process (a case lost this one's CUDA context, and every later CUDA call of
    the process would fail for it); their JSON lines pass through; returns their (ok, failed) counts."""
    print(f"models: the CUDA context is lost; {', '.join(names)} run in a fresh process", flush=True)
    args = [a for a in (sys.argv[1:] if argv is None else argv)]
    if "--only" in args:
        del args[args.index("--only"):args.index("--only") + 2]
    args = [a for a in args if not a.startswith("--only=")]
    done = subprocess.run([sys.executable, __file__, *args, "--only", ",".join(names)], stdout=subprocess.PIPE,
                          text=True)
    lines = done.stdout.splitlines()
    print("\n".join(line for line in lines if not line.startswith("models: ")), flush=True)
    counts = next((line.split() for line in reversed(lines) if line.startswith("models: ") and " ok, " in line), None)
    return (int(counts[1]), int(counts[3])) if counts else (0, len(names))


if __name__ == "__main__":
    sys.exit(main())
