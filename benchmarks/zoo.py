"""Whole models on the CPU, as a new user would run them: eager, torch.compile (Inductor) and ember.compile.

timm image models and transformers language models with random weights (nothing is downloaded), plus three of
benchmarks/models.py's workloads and a pointwise chain of transcendental ops. Each model is measured for inference
(eval mode, parameters that do not require grad, no_grad: deployed inference; ember freezes such a model by
default, Inductor's freezing is opt-in and stays off) and for a training step (train mode with dropout off,
forward, loss = mean of the squared output, backward; gradients set to None first, as an optimizer's zero_grad
does).

Each (model, inference or training, threads) is measured in `--processes` fresh processes with fresh compile caches
(benchmarks/_harness.py, shared with cpu.py). In a process the three variants take turns inside every timing repeat;
the table gives medians over processes of each process's median time. Every process also checks the compiled results
against eager (outputs; the loss and every gradient for training; a result off eager's tolerance is then run in
float64 and counts as wrong only if its error is over 3x eager's, the accuracy contract of ARCHITECTURE.md: eager is
not exact either) and times each compiler's cold compile (first call minus an eager call, after one tiny compile by
each so that process start-up is not counted, and torch._dynamo.reset()). The compilers' order alternates between
processes. A model that fails to compile or compiles to a wrong result is reported, not fatal. `--dtype bfloat16`
measures inference of the models converted to bf16 (`model.to(torch.bfloat16)`), where oneDNN takes its BF16/AMX
paths on CPUs that have them.

Usage: python benchmarks/zoo.py [--models a,b] [--threads 1,2] [--processes 2] [--repeats 10] [--quick]
                                [--dtype float32|bfloat16] [--write] [--json PATH]
Needs timm and transformers (benchmarks/requirements.txt).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _harness
from _harness import first_call_s, timed

if "--child" in sys.argv:  # fresh caches for cold compile times: set before torch/ember import them
    _harness.use_fresh_caches("ember-zoo-")

import ember  # noqa: E402
import torch  # noqa: E402
from ember_core.testing import errors_against, too_far  # noqa: E402
from models import Block, GeluMLP, pointwise_chain, transcendental_chain  # noqa: E402
from torch import nn  # noqa: E402

COMPILERS = ("inductor", "ember")
_TORCHVISION_SHIM: list = []  # keeps the shim's Library alive: dropping it would remove the schemas again


def import_torchvision() -> None:
    """Import torchvision, which timm and transformers import, even where its C extension cannot load.

    Here pip's torchvision is a CUDA build whose extension does not load next to the CPU torch; its Python part then
    fails while registering fake kernels for `torchvision::nms` and `torchvision::qnms`, whose schemas only the
    extension defines. Defining the two schemas (no kernels: no benchmark calls them) lets the import finish. Where
    the extension loads, nothing is defined: the extension defines them itself and a second definition would clash.
    """
    try:
        import torchvision  # noqa: F401
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]  # the failed import's half-initialised modules
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_SHIM.append(lib)
        import torchvision  # noqa: F401


@dataclass
class Model:
    name: str
    inputs: str  # input sizes, for the README
    build: Callable[[], tuple[Callable, tuple, dict]]  # → (module or function, args, kwargs)


def _timm(name: str, batch: int, size: int = 224) -> Callable:
    def build():
        import_torchvision()
        import timm

        model = timm.create_model(name, pretrained=False, drop_rate=0.0, drop_path_rate=0.0)
        return model, (torch.randn(batch, 3, size, size),), {}

    return build


def _tokens(vocab: int, batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


def _bert():
    import_torchvision()
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertModel(config), (_tokens(config.vocab_size, 2, 128),), {}


def _gpt2():
    import_torchvision()
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=8192, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, use_cache=False)
    return GPT2LMHeadModel(config), (_tokens(config.vocab_size, 2, 128),), {}


def _t5():
    import_torchvision()
    from transformers import T5Config, T5Model

    config = T5Config(num_layers=2, num_decoder_layers=2, dropout_rate=0.0, use_cache=False)  # t5-small's widths
    ids = _tokens(config.vocab_size, 2, 64)
    return T5Model(config), (), {"input_ids": ids, "decoder_input_ids": ids}


MODELS = [
    Model("resnet18", "1x3x224x224", _timm("resnet18", 1)),
    Model("mobilenetv3_small_100", "2x3x224x224", _timm("mobilenetv3_small_100", 2)),
    Model("vit_tiny_patch16_224", "1x3x224x224", _timm("vit_tiny_patch16_224", 1)),
    Model("convnext_atto", "2x3x224x224", _timm("convnext_atto", 2)),
    Model("bert", "2x128 tokens; 4 layers, width 256", _bert),
    Model("gpt2", "2x128 tokens; 4 layers, width 256, vocabulary 8192", _gpt2),
    Model("t5", "2x64 tokens in and out; 2+2 layers of t5-small", _t5),
    Model("gelu_mlp", "256x512", lambda: (GeluMLP(), (torch.randn(256, 512),), {})),
    Model("attention_block", "8x128x256", lambda: (Block(), (torch.randn(8, 128, 256),), {})),
    Model("pointwise_chain", "4M", lambda: (pointwise_chain, (torch.randn(4 << 20), torch.randn(4 << 20)), {})),
    Model("transcendental_chain", "2048x2048",
          lambda: (transcendental_chain, (torch.randn(2048, 2048), torch.randn(2048, 2048)), {})),
]
BY_NAME = {m.name: m for m in MODELS}
# relative to the largest magnitude of the eager tensor; a miss is checked against float64 (`too_far_from_float64`)
TOLERANCE = {torch.float32: {"inference": 1e-3, "training": 1e-3}, torch.bfloat16: {"inference": 2e-2}}


# --- one process: one model, inference or training, one thread count ---

def main_tensor(out) -> torch.Tensor:
    """The output a user reads: the tensor itself, or a transformers output's first field."""
    return out if isinstance(out, torch.Tensor) else out[0]


@dataclass
class Variant:
    """A model (or function) with its own parameters, and its step: an inference call or a training step."""
    model: Callable
    args: tuple
    kwargs: dict
    training: bool

    def leaves(self) -> list[torch.Tensor]:
        if isinstance(self.model, nn.Module):
            return list(self.model.parameters())
        return [a for a in self.args if isinstance(a, torch.Tensor) and a.requires_grad]

    def step(self) -> list[torch.Tensor]:
        """Inference: [output]. Training: [loss, *gradients]; a gradient may be None (BertModel's pooler does not
        feed its first output: eager leaves its gradients None, the compilers give zeros)."""
        if not self.training:
            return [main_tensor(self.model(*self.args, **self.kwargs))]
        leaves = self.leaves()
        for t in leaves:
            t.grad = None
        loss = main_tensor(self.model(*self.args, **self.kwargs)).pow(2).mean()
        loss.backward()
        return [loss.detach(), *(t.grad for t in leaves)]


def variants(model: Model, training: bool, dtype: torch.dtype = torch.float32) -> dict[str, Variant]:
    fn, args, kwargs = model.build()
    if dtype != torch.float32:  # inference in a low precision: the model and its floating-point inputs converted
        fn = fn.to(dtype) if isinstance(fn, nn.Module) else fn
        args = tuple(_floats_to(a, dtype) for a in args)
        kwargs = {k: _floats_to(v, dtype) for k, v in kwargs.items()}
    if isinstance(fn, nn.Module):
        fn.train(training)
        fn.requires_grad_(training)
    elif training:
        args = tuple(a.requires_grad_() if a.is_floating_point() else a for a in args)
    made = {"eager": Variant(fn, args, kwargs, training)}
    wraps = {"inductor": lambda f: torch.compile(f, backend="inductor"), "ember": ember.compile}
    for name in COMPILERS:
        twin = copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn
        made[name] = Variant(wraps[name](twin), args, kwargs, training)
    return made


def _floats_to(x, dtype: torch.dtype):
    return x.detach().to(dtype).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) and \
        x.is_floating_point() else x


def float64_step(eager: Variant) -> list[torch.Tensor | None]:
    """The step run in float64 from eager's parameters and inputs: the reference that says who is off when a
    compiler and eager disagree. (A training step leaves the parameters as they were; train-mode batch norms use
    the batch's statistics, so the running ones it moved do not matter.)"""
    model = copy.deepcopy(eager.model).double() if isinstance(eager.model, nn.Module) else eager.model
    args = tuple(_floats_to(a, torch.float64) for a in eager.args)
    kwargs = {k: _floats_to(v, torch.float64) for k, v in eager.kwargs.items()}
    return Variant(model, args, kwargs, eager.training).step()


def mismatch(got: list[torch.Tensor | None], want: list[torch.Tensor | None], tol: float) -> str | None:
    """None if every tensor is close to eager's, else which one differs and how. A tensor's absolute tolerance
    scales with its largest value, and at least with a thousandth of the largest value of them all: a gradient that
    is zero in exact arithmetic (a bias before a normalization) is rounding noise in both."""
    rows = present(got, want)
    scale = max(float(w.abs().max()) for _, w in rows)
    for i, (g, w) in enumerate(rows):
        try:
            torch.testing.assert_close(g, w, rtol=tol, atol=tol * max(float(w.abs().max()), 1e-3 * scale))
        except AssertionError as e:
            return f"{_label(i, len(rows))} {tuple(w.shape)}: " + " ".join(str(e).split("\n")[1:4])
    return None


def too_far_from_float64(got: list[torch.Tensor | None], want: list[torch.Tensor | None],
                         reference: list[torch.Tensor | None]) -> str | None:
    """The accuracy contract, for a result that missed eager's tolerance: None if every tensor's error against the
    float64 run is at most 3x eager's (`ember_core.testing.too_far`), else the worst one."""
    rows = present(got, want, reference)
    names = [_label(i, len(rows)) for i in range(len(rows))]
    compiled, eager, ref = zip(*rows)
    bad = too_far(errors_against(names, ref, eager, compiled))
    return str(max(bad, key=lambda e: e.ratio)) if bad else None


def present(*columns: list[torch.Tensor | None]) -> list[tuple[torch.Tensor, ...]]:
    """The rows of results (compiled, eager[, float64]) that any column has; a None among them (a gradient autograd
    left out: BertModel's pooler) stands as zeros."""
    rows = [row for row in zip(*columns, strict=True) if any(t is not None for t in row)]
    return [tuple(torch.zeros_like(next(u for u in row if u is not None)) if t is None else t for t in row)
            for row in rows]


def _label(i: int, n: int) -> str:
    return "output" if n == 1 else ("loss" if i == 0 else f"gradient {i - 1} of {n - 1}")


def measure(name: str, training: bool, threads: int, repeats: int, order: list[str],
            dtype: torch.dtype = torch.float32) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    made = variants(BY_NAME[name], training, dtype)
    for compile_ in (lambda f: torch.compile(f, backend="inductor"), ember.compile):
        compile_(lambda t: t + 1)(torch.ones(8))  # one-time process start-up (imports, workers) is not the model's
    torch._dynamo.reset()
    result: dict = {"cold": {}, "errors": {}, "wrong": {}, "float64_checked": {}}
    with torch.enable_grad() if training else torch.no_grad():
        want = [None if t is None else t.detach().clone() for t in made["eager"].step()]
        reference = None
        for c in order:
            start = time.perf_counter()
            try:
                got = made[c].step()
            except Exception as e:  # a compiler's failure is a result, not the end of the run
                result["errors"][c] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                traceback.print_exc()
                del made[c]
                continue
            result["cold"][c] = time.perf_counter() - start
            bad = mismatch(got, want, TOLERANCE[dtype]["training" if training else "inference"])
            if bad:  # off eager's: wrong only if further from float64 than the contract allows
                reference = reference or float64_step(made["eager"])
                far = too_far_from_float64(got, want, reference)
                result["wrong" if far else "float64_checked"][c] = far or bad
        eager_s = first_call_s(made["eager"].step)
        result["cold"] = {c: s - eager_s for c, s in result["cold"].items()}
        result["times"] = timed({n: v.step for n, v in made.items()}, (), repeats)
    return result


# --- the parent: processes, medians, the table ---

@dataclass
class Cell:
    """One model, inference or training, one thread count: the runs of every process."""
    runs: list[dict]
    failure: str = ""  # a process that gave no result

    def ok(self, c: str) -> bool:
        return bool(self.runs) and all(c in r["times"] and c not in r["wrong"] for r in self.runs)

    def median(self, c: str) -> float:
        return statistics.median(r["times"][c] for r in self.runs)

    def ratio(self, a: str, b: str) -> float:
        """Median over processes of a's time over b's."""
        return statistics.median(r["times"][a] / r["times"][b] for r in self.runs)

    def columns(self) -> list[str]:
        if not self.runs:
            return ["failed", "", "", ""]
        mark = {c: "" if self.ok(c) else (" (wrong)" if any(c in r["wrong"] for r in self.runs) else " (error)")
                for c in COMPILERS}
        speed = {c: f"{self.ratio('eager', c):.2f}x" if self.ok(c) else mark[c].strip(" ()") for c in COMPILERS}
        both = f"**{self.ratio('inductor', 'ember'):.2f}**" if all(map(self.ok, COMPILERS)) else ""
        return [f"{self.median('eager') * 1e3:.2f}", speed["inductor"], speed["ember"], both]


def run_cell(name: str, training: bool, threads: int, processes: int, repeats: int, dtype: str) -> Cell:
    runs, failure = [], ""
    for p in range(processes):
        order = list(COMPILERS) if p % 2 == 0 else list(reversed(COMPILERS))
        args = [name, "--training" if training else "--inference", "--threads", str(threads),
                "--repeats", str(repeats), "--order", ",".join(order), "--dtype", dtype]
        try:
            runs.append(_harness.run_child(__file__, args, timeout_s=1800))
        except RuntimeError as e:
            failure = str(e)
            print(failure, file=sys.stderr)
    return Cell(runs, failure)


def geomean_row(threads: int, cells: dict[tuple[str, str, int], Cell], names: list[str], kinds: list[str]) -> str:
    """Geometric means over the models both compilers ran correctly."""
    cols = []
    for kind in kinds:
        chosen = [c for c in (cells[(n, kind, threads)] for n in names) if all(map(c.ok, COMPILERS))]
        cols.append("")  # eager ms
        for a, b, form in (("eager", "inductor", "{:.2f}x"), ("eager", "ember", "{:.2f}x"),
                           ("inductor", "ember", "**{:.2f}**")):
            cols.append(form.format(statistics.geometric_mean([c.ratio(a, b) for c in chosen])) if chosen else "")
    return f"| {threads} | geomean | " + " | ".join(cols) + " |"


def cold_table(cells: dict[tuple[str, str, int], Cell], names: list[str], kinds: list[str]) -> list[str]:
    head = "".join(f" {k}: inductor s | ember s | ember / inductor |" for k in kinds)
    lines = [f"| model | inputs |{head}", "|---|---|" + "---:|" * 3 * len(kinds)]
    for n in names:
        row = [f"| {n} | {BY_NAME[n].inputs} |"]
        for kind in kinds:
            runs = [r for (m, k, _), c in cells.items() if m == n and k == kind for r in c.runs]
            cold = {c: [r["cold"][c] for r in runs if c in r["cold"]] for c in COMPILERS}
            med = {c: statistics.median(v) if v else None for c, v in cold.items()}
            row += [f" {med[c]:.1f} |" if med[c] is not None else " |" for c in COMPILERS]
            both = med["inductor"] is not None and med["ember"] is not None
            row.append(f" {med['ember'] / med['inductor']:.2f} |" if both else " |")
        lines.append("".join(row))
    return lines


def failures(cells: dict[tuple[str, str, int], Cell]) -> list[str]:
    out = []
    for (name, kind, threads), cell in cells.items():
        if cell.failure:
            last = [x for x in cell.failure.splitlines() if x.strip()][-1]
            out.append(f"- {name}, {kind}, {threads} thread(s): no result: {last.strip()}")
        for c in COMPILERS:
            for what, label in FAILURES.items():
                msgs = sorted({r[what][c] for r in cell.runs if c in r.get(what, {})})
                out += [f"- {c}, {name}, {kind}, {threads} thread(s) {label}: {m}" for m in msgs]
    return out


FAILURES = {"errors": "fails", "wrong": "is wrong (beyond eager's tolerance and over 3x eager's error against "
            "float64)", "float64_checked": "is beyond eager's tolerance but within 3x eager's error against float64 "
            "(not a failure)"}


def report(cells, names: list[str], threads: list[int], command: str, dtype: str) -> str:
    kinds = KINDS[dtype]
    head = "".join(f" {k}: eager ms | inductor | ember | inductor / ember |" for k in kinds)
    lines = [
        f"`{command}` ({os.cpu_count()} cores, torch {torch.__version__}, ember {ember.__version__}, codegen "
        f"{_harness.cpu_codegen()}, {time.strftime('%Y-%m-%d')}): median time per call over fresh processes; "
        "speedups over eager; \"inductor / ember\" is the median of the per-process ratios of Inductor's time to "
        "ember's (above 1: ember faster). " + ("Training: forward, loss, backward. " if "training" in kinds else
        f"Model and inputs in {dtype}. ") + "Needs timm and transformers "
        "(`pip install -r benchmarks/requirements.txt`; `nox -s bench -- benchmarks/zoo.py` installs them).", "",
        f"| threads | model |{head}", "|---|---|" + "---:|" * 4 * len(kinds)]
    for t in threads:
        for n in names:
            cols = [col for k in kinds for col in cells[(n, k, t)].columns()]
            lines.append(f"| {t} | {n} | " + " | ".join(cols) + " |")
        lines.append(geomean_row(t, cells, names, kinds))
    lines += ["", "Cold compile, seconds (first call minus an eager call, fresh caches; median over processes and "
              "thread counts):", "", *cold_table(cells, names, kinds)]
    notes = failures(cells)
    lines += ["", "Results off eager's tolerance:", "", *notes] if notes else \
        ["", "Every compiled result matched eager."]
    return "\n".join(lines)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
KINDS = {"float32": ["inference", "training"], "bfloat16": ["inference"]}  # bf16: deployed inference only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(BY_NAME))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--processes", type=int, default=2, help="fresh processes per measurement")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="one process, 3 repeats: a smoke test")
    parser.add_argument("--write", action="store_true", help="put the table in benchmarks/README.md, 'Model zoo'")
    parser.add_argument("--json", default="", help="write every process's raw numbers to this file")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES),
                        help="bfloat16: inference of the model converted to it (model.to(torch.bfloat16))")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--training", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inference", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--order", default=",".join(COMPILERS), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(measure(opts.child, opts.training, int(opts.threads), opts.repeats, opts.order.split(","),
                                 DTYPES[opts.dtype])))
        return
    if opts.quick:
        opts.processes, opts.repeats = 1, 3
    names = [n.strip() for n in opts.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        sys.exit(f"unknown models {unknown}; known: {', '.join(BY_NAME)}")
    threads = [int(t) for t in opts.threads.split(",")]
    cells = {}
    for t in threads:
        for n in names:
            for kind in KINDS[opts.dtype]:
                cells[(n, kind, t)] = cell = run_cell(n, kind == "training", t, opts.processes, opts.repeats,
                                                      opts.dtype)
                print(f"{t} thread(s) {n} {kind}: " + " | ".join(cell.columns()), flush=True)
    command = " ".join(["python benchmarks/zoo.py", *sys.argv[1:]])
    text = report(cells, names, threads, command, opts.dtype)
    print(text)
    if opts.json:
        raw = [{"model": n, "kind": k, "threads": t, "runs": c.runs, "failure": c.failure}
               for (n, k, t), c in cells.items()]
        Path(opts.json).write_text(json.dumps(raw, indent=1))
    if opts.write:
        # one section per machine measured: a write replaces this CPU's, never another's
        what = "Model zoo" if opts.dtype == "float32" else f"Model zoo, {opts.dtype} inference,"
        _harness.write_section(Path(__file__).with_name("README.md"), f"## {what} on {_harness.machine()}", text)


if __name__ == "__main__":
    sys.exit(main())
