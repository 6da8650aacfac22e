"""One program's verdict: its loss, output and gradients, compiled by ember, against eager's, both against a
float64 run (the accuracy contract of ARCHITECTURE.md)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import ember
import torch
from ember_core.testing import NOISE_ULPS, errors_against, too_far

from .programs import LOSS_WEIGHTS, SCALES, Module, Program, with_edges, with_floats


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
    dtype: str = "float32"  # the module's and the inputs' dtype in the runs checked (the reference is float64)
    inference: bool = False  # called under no_grad: loss, output and buffers compared, no backward
    steps: int = 1  # training steps, an SGD update of the parameters between them (each step compared)
    compiled_autograd: bool = False  # ember's runs' backward captured whole at run time and compiled by ember
    floats: bool = False  # SCALED steps added, the float they read changed every step (at least 3 steps)
    edges: bool = False  # EDGES steps added: int arguments at the edges of their ranges

    def __str__(self) -> str:
        changed = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                   if getattr(self, f.name) != f.default]
        return ", ".join(changed) or "defaults"


LEARNING_RATE = 0.05


def _names(program: Program, model: torch.nn.Module, setting: Setting) -> list[str]:
    grads = ([] if setting.inference else [f"grad of input {k}" for k in range(program.inputs)]
             + [f"grad of {n}" for n, _ in model.named_parameters()])
    return ["loss", "output"] + grads + [f"buffer {n}" for n, _ in model.named_buffers()]


def _results(module: torch.nn.Module, run, inputs: Sequence[torch.Tensor], setting: Setting,
             autocast: bool | None = None, captured: bool = False, scale: float = 0.5) -> list:
    """Loss, output, the inputs' gradients, the parameters' (None where autograd leaves none) and the buffers after
    the call with `scale`; under `setting.inference` loss, output and buffers. `captured`: the backward under
    `ember.compiled_autograd`."""
    autocast = setting.autocast if autocast is None else autocast
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    if setting.inference:
        with torch.no_grad(), cast:
            loss, out = run(*inputs, scale=scale)
        return [loss, out] + [b.detach().clone() for b in module.buffers()]
    leaves = [_leaf(x) for x in inputs]
    module.zero_grad(set_to_none=True)
    with cast:
        loss, out = run(*leaves, scale=scale)
    with ember.compiled_autograd.enable() if captured else contextlib.nullcontext():
        (loss + out.sum()).backward()
    return ([loss.detach(), out.detach()] + [x.grad for x in leaves] + [p.grad for p in module.parameters()]
            + [b.detach().clone() for b in module.buffers()])


def _sgd(module: torch.nn.Module) -> None:
    """One SGD step on the parameters that took a gradient (in place: a compiled module must see the new values)."""
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p.sub_(LEARNING_RATE * p.grad)


def _follow(reference: torch.nn.Module, runs: Sequence[torch.nn.Module]) -> None:
    """The runs' parameters and buffers set to the float64 run's after a step (in place: a compiled module reads the
    same tensors), so that every step and the second batch size start all three from one state. Each run's own
    updates drift apart by roundings, and a later step then measured the drift, not the step (seed 9 with
    `--dynamic --floats`: the parameters of eager and ember 5e-7 apart after three steps, the output at the second
    batch size 45x eager's error)."""
    state = reference.state_dict()
    for run in runs:
        own = run.state_dict()
        run.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})


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
    ember.compiled_autograd.reset()
    torch.manual_seed(program.seed)
    program = with_floats(program) if setting.floats else program
    program = with_edges(program) if setting.edges else program
    dtype = getattr(torch, setting.dtype)
    inputs = program.make_inputs(dtype)
    model = Module(program).to(dtype)
    names = _names(program, model, setting)
    reference_model = Module(program).double()
    reference_inputs = program.make_inputs(torch.float64)
    options = {"frontend": setting.frontend, "codegen.cpu": setting.codegen}
    twin = Module(program).to(dtype)  # the same parameters; its own buffers, which the compiled call updates
    compiled = ember.compile(twin, options=options, dynamic=True if setting.dynamic else None)
    steps = max(setting.steps, 3) if setting.floats else setting.steps
    for step in range(steps):
        scale = SCALES[step % len(SCALES)] if setting.floats else 0.5
        reference = _results(reference_model, reference_model, reference_inputs, setting, autocast=False, scale=scale)
        eager = _results(model, model, inputs, setting, scale=scale)
        try:
            got = _results(twin, compiled, inputs, setting, captured=setting.compiled_autograd, scale=scale)
        except Exception as e:  # noqa: BLE001 - a compile or run error is the finding
            return [Finding(program.seed, "compile", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}")]
        where = [f"step {step}: {n}" for n in names] if steps > 1 else names
        eps = torch.finfo(dtype).eps
        findings = _compare(program.seed, where, reference, eager, got, eps,
                            {where[0]: max(_loss_floor(reference_model, reference_inputs, eps, scale),
                                           _summed_element_errors(reference_model, reference_inputs, model, inputs,
                                                                  scale))})
        if findings:
            return findings
        if not setting.inference:
            for m in (reference_model, model, twin):
                _sgd(m)
            _follow(reference_model, (model, twin))
    if setting.dynamic:
        return _second_batch(program, setting, model, twin, compiled, names)
    return []


def _loss_floor(model: Module, inputs: Sequence[torch.Tensor], eps: float, scale: float = 0.5) -> float:
    """The loss's error floor: NOISE_ULPS ulps of every element the loss sums, added as independent roundings.

    The loss is a weighted sum of three values' sums; where those cancel, a few ulps of each element are many ulps
    of the loss (seed 310: terms of 1.9, 1.2 and 0.6 summing to 0.16; a sum of a batch norm's output (seed 331),
    zero in exact arithmetic but for its bias). The floor the judge gives any result, a few ulps of its own size,
    takes such a loss's rounding noise for an error."""
    with torch.no_grad():
        last = copy.deepcopy(model).last_values(*inputs, scale=scale)  # a copy: the call updates statistics
    total = sum(w * w * float(v[v.isfinite()].double().pow(2).sum()) for v, w in zip(last, LOSS_WEIGHTS))
    return NOISE_ULPS * eps * total ** 0.5


def _summed_element_errors(reference_model: Module, reference_inputs: Sequence[torch.Tensor], model: Module,
                           inputs: Sequence[torch.Tensor], scale: float = 0.5) -> float:
    """Eager's error on every element the loss sums, weighted and added as if they all lined up: a compiled loss
    whose elements are each within the contract of eager's may be off by the contract times this. Seed 442's terms
    are `fmod` of a row product of an expanded input, all equal: their errors (a few ulps of the product, ten times
    the values) add up in ember's sum and partly cancel in eager's, a loss 3.4x eager's error from elements 1.3x."""
    with torch.no_grad():  # copies: the calls update running statistics
        reference = copy.deepcopy(reference_model).last_values(*reference_inputs, scale=scale)
        eager = copy.deepcopy(model).last_values(*inputs, scale=scale)
    total = 0.0
    for r, e, w in zip(reference, eager, LOSS_WEIGHTS):
        error = (e.double() - r).abs()
        total += w * float(error[error.isfinite()].sum())
    return total


def _compare(seed: int, names: Sequence[str], reference: Sequence, eager: Sequence, got: Sequence,
             eps: float = torch.finfo(torch.float32).eps, floors: dict[str, float] | None = None) -> list[Finding]:
    """Findings where ember's results are further from `reference` (float64) than the contract lets them be from
    eager's; `floors`: a lowest error floor for some results, by name."""
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
        errors = [dataclasses.replace(e, floor=max(e.floor, (floors or {}).get(e.name, 0.0)))
                  for e in errors_against(names_, refs, eagers, compiled, eps=eps)]
        for error in too_far(errors):
            findings.append(Finding(seed, error.name, str(error)))
    return findings


def _second_batch(program: Program, setting: Setting, model: torch.nn.Module, twin: torch.nn.Module, compiled,
                  names: Sequence[str]) -> list[Finding]:
    """Under dynamic=True: another batch size through the same compiled model, against eager, both against float64
    (each run from the parameters it has now)."""
    other = dataclasses.replace(program, batch=program.batch + 2)
    dtype = getattr(torch, setting.dtype)
    reference_model = Module(program).double()
    reference_model.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    reference = _results(reference_model, reference_model, other.make_inputs(torch.float64), setting, autocast=False)
    eager = _results(model, model, other.make_inputs(dtype), setting)
    got = _results(twin, compiled, other.make_inputs(dtype), setting, captured=setting.compiled_autograd)
    where = [f"at batch {other.batch}: {n}" for n in names]
    eps = torch.finfo(dtype).eps
    reference_inputs = other.make_inputs(torch.float64)
    floor = max(_loss_floor(reference_model, reference_inputs, eps),
                _summed_element_errors(reference_model, reference_inputs, model, other.make_inputs(dtype)))
    return _compare(program.seed, where, reference, eager, got, eps, {where[0]: floor})


def _none(t) -> str:
    return "None" if t is None else "a tensor"
