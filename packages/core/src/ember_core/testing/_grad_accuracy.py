"""The accuracy contract's measurement: how far a compiled model's training gradients are from a float64 run's,
next to how far eager float32's are.

`gradient_errors(model, inputs, compile_fn)` trains three copies of `model` for a few SGD steps on the same inputs:
one in float64 (the reference), one eager in float32, one compiled in float32, and returns each step's RMS error
of every parameter's gradient against the reference, eager's and the compiled one's (`GradError`;
`errors_against` measures any tensors so). `too_far`
lists the gradients where the compiled one is more than `factor` times eager's error off, an error under the
gradient's `floor` counting as the floor. Comparing with float64 says who is off when eager and compiled disagree,
which a comparison with eager cannot.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence

import torch

EPS32 = torch.finfo(torch.float32).eps
FACTOR = 3.0  # ARCHITECTURE.md: a compiled gradient's error is at most 3x eager's
NOISE_ULPS = 4.0  # float32 rounding: this many ulps of a gradient's scale (`floor`)


@dataclasses.dataclass(frozen=True)
class GradError:
    """One parameter's gradient at one training step: RMS errors against float64, and the float64 gradient's RMS."""

    name: str
    step: int
    threads: int
    eager: float
    compiled: float
    scale: float  # RMS of the float64 gradient
    floor: float  # errors below this are as good as float32 gets (`floor`)

    @property
    def ratio(self) -> float:
        """The compiled error over eager's, each raised to the floor."""
        return max(self.compiled, self.floor) / max(self.eager, self.floor, 1e-300)

    def __str__(self) -> str:
        return (f"{self.name} (step {self.step}, {self.threads} thread(s)): compiled {self.compiled:.2e}, "
                f"eager {self.eager:.2e} ({self.ratio:.1f}x; gradient RMS {self.scale:.2e}, floor {self.floor:.1e})")


def rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt()) if x.numel() else 0.0


def default_loss(out: torch.Tensor) -> torch.Tensor:
    """The output's mean square (of a model that returns its loss: the loss squared, same directions)."""
    return out.pow(2).mean()


class Trainer:
    """One copy of a model under plain SGD: `step()` runs a forward (`run`: the model, or a compiled wrapper of it),
    the loss's backward and the update, and returns the gradients (zeros where autograd leaves none)."""

    def __init__(self, model: torch.nn.Module, run: Callable, inputs: Sequence, loss_fn: Callable, lr: float):
        self.params = list(model.parameters())
        self.run, self.inputs, self.loss_fn = run, inputs, loss_fn
        self.optimizer = torch.optim.SGD(self.params, lr=lr)

    def step(self) -> list[torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_fn(self.run(*self.inputs)).backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in self.params]
        self.optimizer.step()
        return grads

    def load(self, params: Sequence[torch.Tensor]) -> None:
        """Write `params` (rounded to each parameter's dtype) into the parameters in place, as an optimizer does."""
        with torch.no_grad():
            for p, q in zip(self.params, params, strict=True):
                p.copy_(q)


def training_gradients(model: torch.nn.Module, run: Callable, inputs: Sequence, loss_fn: Callable = default_loss,
                       steps: int = 2, lr: float = 0.1) -> list[list[torch.Tensor]]:
    """Each step's gradients of `model`'s parameters, trained with plain SGD through `run`."""
    trainer = Trainer(model, run, inputs, loss_fn, lr)
    return [trainer.step() for _ in range(steps)]


def gradient_errors(model: torch.nn.Module, inputs: Sequence, compile_fn: Callable, loss_fn: Callable = default_loss,
                    steps: int = 2, lr: float = 0.1, threads: Sequence[int] = (),
                    follow_reference: bool = True) -> list[GradError]:
    """Per step and parameter, eager float32's and the compiled model's gradient errors against a float64 run of
    the same training (`compile_fn(module)` gives the compiled forward; `model` itself is left untouched).

    `threads`: the training runs at each of these thread counts (`torch.set_num_threads`, restored after), every
    copy starting again from `model`'s state, the model compiled once; none: at the current count.

    `follow_reference`: each step after the first starts the float32 runs from the float64 run's parameters,
    written in place after their own update, as an optimizer writes them. Left to themselves, two float32 trainings
    drift apart, and a step taken from parameters a rounding apart can cross a kink (a ReLU input or a max-pool
    tie near zero) that the other does not: a toy resnet18's second step, eager channels-last against eager, came
    out 140x further from float64 than eager's. Following the reference measures each step's arithmetic, which is
    what the accuracy contract bounds; the second step still runs the compiled model on parameters it did not see
    at its first call."""
    names = [n for n, _ in model.named_parameters()]
    state = copy.deepcopy(model.state_dict())
    models = [copy.deepcopy(model).double(), copy.deepcopy(model), copy.deepcopy(model)]
    reference = Trainer(models[0], models[0], [_to_float64(x) for x in inputs], loss_fn, lr)
    runs = [Trainer(models[1], models[1], inputs, loss_fn, lr),
            Trainer(models[2], compile_fn(models[2]), inputs, loss_fn, lr)]
    before, errors = torch.get_num_threads(), []
    try:
        for count in threads or [before]:
            torch.set_num_threads(count)
            for m in models:
                m.load_state_dict(state)  # in place: the compiled model reads the same tensors
            for step in range(steps):
                if step and follow_reference:
                    for run in runs:
                        run.load(reference.params)
                ref = reference.step()
                eager, compiled = (run.step() for run in runs)
                errors += errors_against(names, ref, eager, compiled, step=step, threads=count)
    finally:
        torch.set_num_threads(before)
    return errors


def too_far(errors: Sequence[GradError], factor: float = FACTOR) -> list[GradError]:
    """The gradients whose compiled error is more than `factor` times eager's (an error under the floor counts as
    the floor)."""
    return [e for e in errors if e.compiled > factor * max(e.eager, e.floor)]


def floor(scale: float, largest: float, level: float, eps: float = EPS32) -> float:
    """The error below which a float32 gradient is as good as float32 gets: `scale` its float64 RMS, `largest` the
    step's largest, `level` eager's error relative to all of the step's gradients (`relative_error`). `eps` is the
    machine epsilon of the dtype compared (bfloat16's, for a model that runs in bfloat16).

    A gradient that is zero in exact arithmetic (under float32's resolution at the step's largest gradient: the
    bias of a convolution before a batch norm) is rounding noise of terms the size of the other gradients in every
    float32 run: NOISE_ULPS ulps of `largest`. Any other: NOISE_ULPS ulps of its own scale, or eager's error level
    on the model, whichever is larger. (Eager's error on a gradient of a few elements can land several times under
    its level by chance; eager without oneDNN, another float32 implementation, came out 2.6x eager's on a bias.)"""
    zero = NOISE_ULPS * eps * largest
    if scale < zero:
        return zero
    return max(NOISE_ULPS * eps * scale, level * scale)


def relative_error(errors: Sequence[float], scales: Sequence[float], sizes: Sequence[int]) -> float:
    """The RMS of `errors` over the RMS of `scales`, every element of every gradient (`sizes`) weighing the same."""
    ref2 = sum(s * s * n for s, n in zip(scales, sizes))
    return (sum(e * e * n for e, n in zip(errors, sizes)) / ref2) ** 0.5 if ref2 else 0.0


def errors_against(names: Sequence[str], ref: Sequence[torch.Tensor], eager: Sequence[torch.Tensor],
                   compiled: Sequence[torch.Tensor], step: int = 0, threads: int = 0, eps: float = EPS32
                   ) -> list[GradError]:
    """Each tensor's RMS error against its float64 reference, eager's and the compiled one's, with its floor: one
    training step's gradients, or any results a float64 run can check (a model's outputs, a loss, ...). `eps`: the
    machine epsilon of the dtype the runs computed in (`floor`)."""
    scales = [rms(r) for r in ref]
    eager_errors = [rms(e.double() - r) for e, r in zip(eager, ref)]
    largest = max(scales, default=0.0)
    level = relative_error(eager_errors, scales, [r.numel() for r in ref])
    return [GradError(name, step, threads, e, rms(c.double() - r), scale, floor(scale, largest, level, eps))
            for name, r, c, e, scale in zip(names, ref, compiled, eager_errors, scales, strict=True)]


def _to_float64(x):
    return x.detach().double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
