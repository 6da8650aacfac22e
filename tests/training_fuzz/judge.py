"""One program's verdict: its loss, output and gradients, compiled by ember, against eager's, both against a
float64 run (the accuracy contract of ARCHITECTURE.md)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import ember
import torch
from ember_core.testing import errors_against, too_far

from .programs import Module, Program


@dataclass(frozen=True)
class Finding:
    seed: int
    what: str  # "loss", "output", "grad of input 0", "grad of w", "compile", ...
    message: str

    def __str__(self) -> str:
        return f"seed {self.seed}: {self.what}: {self.message}"


@dataclass(frozen=True)
class Verdict:
    findings: list[Finding]  # what is wrong (none: the program trains as the contract says)
    fallbacks: list[str]  # the `fallback` events of the compiled calls (graphs that ran eagerly, by design or not)


@dataclass(frozen=True)
class Setting:
    frontend: str = "dynamo"
    codegen: str = "cpp"  # the CPU codegen: cpp, or interpreter (ember's plan run op by op)
    dynamic: bool = False  # compiled with dynamic=True and called again at another batch size
    autocast: bool = False  # the float32 runs (eager and ember) under CPU autocast to bfloat16


def _results(module: torch.nn.Module, run, inputs: Sequence[torch.Tensor], autocast: bool) -> list:
    """Loss, output, the inputs' gradients, the parameters' (None where autograd leaves none) and the buffers after
    the call."""
    leaves = [_leaf(x) for x in inputs]
    module.zero_grad(set_to_none=True)
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with cast:
        loss, out = run(*leaves)
    (loss + out.sum()).backward()
    return ([loss.detach(), out.detach()] + [x.grad for x in leaves] + [p.grad for p in module.parameters()]
            + [b.detach().clone() for b in module.buffers()])


def _leaf(x: torch.Tensor) -> torch.Tensor:
    """A leaf with `x`'s values in `x`'s memory (its strides and offset; an expanded row's stride 0 too)."""
    return x.detach().requires_grad_()


def check(program: Program, setting: Setting = Setting()) -> Verdict:
    """What is wrong with ember's run of `program`, and which of its graphs fell back."""
    with ember.record_events() as recorded:
        findings = _check(program, setting)
    return Verdict(findings, [e.message.splitlines()[0] for e in recorded.events if e.kind == "fallback"])


def _check(program: Program, setting: Setting) -> list[Finding]:
    torch._dynamo.reset()
    torch.manual_seed(program.seed)
    inputs = program.make_inputs()
    model = Module(program)
    names = (["loss", "output"] + [f"grad of input {k}" for k in range(program.inputs)]
             + [f"grad of {n}" for n, _ in model.named_parameters()]
             + [f"buffer {n}" for n, _ in model.named_buffers()])
    reference_model = Module(program).double()
    reference = _results(reference_model, reference_model, program.make_inputs(torch.float64), False)
    eager = _results(model, model, inputs, setting.autocast)
    options = {"frontend": setting.frontend, "codegen.cpu": setting.codegen}
    twin = Module(program)  # the same parameters; its own buffers, which the compiled call updates
    compiled = ember.compile(twin, options=options, dynamic=True if setting.dynamic else None)
    try:
        got = _results(twin, compiled, inputs, setting.autocast)
    except Exception as e:  # noqa: BLE001 - a compile or run error is the finding
        return [Finding(program.seed, "compile", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}")]
    findings = _compare(program.seed, names, reference, eager, got)
    if setting.dynamic and not findings:
        findings = _second_batch(program, setting, model, twin, compiled, names)
    return findings


def _compare(seed: int, names: Sequence[str], reference: Sequence, eager: Sequence, got: Sequence) -> list[Finding]:
    findings, kept = [], []
    for name, r, e, c in zip(names, reference, eager, got, strict=True):
        if e is None or c is None:
            if (e is None) != (c is None):
                findings.append(Finding(seed, name, f"eager's is {_none(e)}, ember's {_none(c)}"))
            continue
        if c.shape != e.shape or c.dtype != e.dtype:
            findings.append(Finding(seed, name, f"ember's is {c.dtype}{list(c.shape)}, "
                                                f"eager's {e.dtype}{list(e.shape)}"))
            continue
        finite_e, finite_c = torch.isfinite(e), torch.isfinite(c)
        if not torch.equal(finite_e, finite_c):
            findings.append(Finding(seed, name, f"{int((finite_e != finite_c).sum())} element(s) finite in one of "
                                                f"eager and ember only"))
            continue
        keep = finite_e & torch.isfinite(r)
        kept.append((name, r[keep], e[keep], c[keep]))
    if kept:
        names_, refs, eagers, compiled = zip(*kept)
        for error in too_far(errors_against(names_, refs, eagers, compiled)):
            findings.append(Finding(seed, error.name, str(error)))
    return findings


def _second_batch(program: Program, setting: Setting, model: torch.nn.Module, twin: torch.nn.Module, compiled,
                  names: Sequence[str]) -> list[Finding]:
    """Under dynamic=True: another batch size through the same compiled model, against eager."""
    inputs = dataclasses.replace(program, batch=program.batch + 2).make_inputs()
    eager = _results(model, model, inputs, setting.autocast)
    got = _results(twin, compiled, inputs, setting.autocast)
    findings = []
    for name, e, c in zip(names, eager, got, strict=True):
        if e is None or c is None:
            continue
        try:
            torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-4, equal_nan=True)
        except AssertionError as err:
            findings.append(Finding(program.seed, name, f"at batch {program.batch + 2}: {str(err).splitlines()[0]}"))
    return findings


def _none(t) -> str:
    return "None" if t is None else "a tensor"
