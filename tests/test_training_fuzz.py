"""A few programs of the training fuzzer (tests/training_fuzz) in each setting; the wide runs are
`nox -s training_fuzz`. Each program's loss, output and gradients compiled by ember are within the accuracy contract
of eager's (against float64), with no compile error and no graph run eagerly."""

from __future__ import annotations

import pytest
import torch
from training_fuzz import judge, programs

# Seeds whose programs between them reach reductions and scans over both dims, in-place updates, gathers and
# scatters, norms, a matmul, a convolution, losses, a buffer updated in place and inputs in every layout
# (`python -m tests.training_fuzz run --seeds S --show` prints one); none has a graph that runs eagerly.
SETTINGS = {
    "dynamo": (judge.Setting(), [233, 37, 196, 273]),  # 273: a gather by an index stored in the same kernel
    "trace": (judge.Setting(frontend="trace"), [138, 11]),
    # 38: a cumprod's backward fixes a symbol; 425: lerp's copy_strided of a transposed input
    "dynamic": (judge.Setting(dynamic=True), [11, 38, 425]),
    "autocast": (judge.Setting(autocast=True), [37]),
    "bfloat16": (judge.Setting(dtype="bfloat16"), [109]),  # 109: a batch norm of equal rows
    "inference": (judge.Setting(inference=True), [196]),
    "steps": (judge.Setting(steps=3), [233]),
    "compiled autograd": (judge.Setting(compiled_autograd=True, dtype="bfloat16"), [109]),  # 109: a batch norm
    # a float argument that changes every step: add's and sub's alpha (14), addmm's beta and alpha (15), pow of it
    # (38) and to it (12), which traced as forms whose formulas ask nothing of it (they ran under eager autograd)
    "floats": (judge.Setting(floats=True), [14, 15, 38, 12]),
    # slices from before the start (6, 7, 11: their gradients were written off by columns, 10: slice_scatter's
    # forward too), ends, pads that cut, splits past the width; at a second batch size (8: rows from before the start)
    "edges": (judge.Setting(edges=True), [7, 10, 11]),
    "edges dynamic": (judge.Setting(edges=True, dynamic=True), [6, 8]),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_fuzzed_programs_train_as_accurately_as_eager(name):
    setting, seeds = SETTINGS[name]
    verdicts = [judge.check(programs.generate(seed), setting) for seed in seeds]
    findings = [f for v in verdicts for f in v.findings]
    assert not findings, "\n".join(map(str, findings))
    assert not [f for v in verdicts for f in v.fallbacks]


def test_the_judge_finds_a_wrong_gradient_a_nan_and_a_missing_one():
    torch.manual_seed(0)
    reference = [torch.randn(4, 5, dtype=torch.float64) for _ in range(3)]
    eager = [r.float() for r in reference]
    assert not judge._compare(0, ["a", "b", "c"], reference, eager, [e.clone() for e in eager])
    wrong = [eager[0] * 1.001, eager[1].clone(), None]
    wrong[1][2, 3] = float("nan")
    found = judge._compare(0, ["a", "b", "c"], reference, eager, wrong)
    assert sorted(f.what for f in found) == ["a", "b", "c"], found


def test_a_loss_whose_terms_cancel_is_judged_by_the_size_of_its_terms():
    """Seed 310's loss (0.57) sums terms of -0.74, 1.86 and -0.55 (0.16 a step later): their float32 rounding is
    many ulps of the loss, and eager's error on it may land far under that by chance. The loss's floor counts every
    element it sums; a loss off by more than that is still a finding, and working out the floor leaves the model's
    buffers alone."""
    eps = torch.finfo(torch.float32).eps
    program = programs.generate(310)
    model = programs.Module(program).double()
    inputs = program.make_inputs(torch.float64)
    running = model.running.clone()
    loss = model(*inputs)[0].detach().reshape(1)
    model.running.copy_(running)
    floor = judge._loss_floor(model, inputs, eps)
    assert torch.equal(model.running, running)
    assert floor > 3 * judge.NOISE_ULPS * eps * float(loss.abs())
    exact = [loss, loss.float()]  # eager exact to float32 rounding: its error is under a tenth of an ulp
    noisy = [(loss + floor).float()]
    assert judge._compare(0, ["loss"], [loss], exact[1:], noisy), "the plain floor (ulps of the loss) is too tight"
    assert not judge._compare(0, ["loss"], [loss], exact[1:], noisy, floors={"loss": floor})
    wrong = [(loss * 1.01).float()]
    assert judge._compare(0, ["loss"], [loss], exact[1:], wrong, floors={"loss": floor})


def test_a_loss_whose_equal_terms_round_alike_is_judged_by_eagers_errors_on_them():
    """Seed 442 sums `fmod`s of a row product of an expanded input, all equal: each element's error is a few ulps of
    the product, and they add up in ember's loss (3.4x eager's, whose partly cancel) though every element is within
    1.3x of eager's. The loss's floor adds eager's element errors as if they lined up; a loss 1% off is still one."""
    program = programs.generate(442)
    reference_model, model = programs.Module(program).double(), programs.Module(program)
    reference_inputs, inputs = program.make_inputs(torch.float64), program.make_inputs()
    floor = judge._summed_element_errors(reference_model, reference_inputs, model, inputs)
    assert floor > 1.95e-5 / 3  # ember's loss error on this program, measured
    assert not judge.check(program).findings
    loss = reference_model(*reference_inputs)[0].detach().reshape(1)
    wrong = [(loss * 1.01).float()]
    assert judge._compare(0, ["loss"], [loss], [loss.float()], wrong, floors={"loss": floor})


def test_a_seed_names_one_program():
    assert programs.generate(7) == programs.generate(7) != programs.generate(8)
    assert str(programs.generate(7)).startswith("seed 7:")
