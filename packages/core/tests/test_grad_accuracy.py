"""The accuracy contract's arithmetic (`errors_against`, `too_far`): a compiled result is judged by its distance
from a float64 reference next to eager float32's, not by its distance from eager."""

from __future__ import annotations

import torch
from ember_core.testing import errors_against, too_far


def _results(compiled_scale: float, n: int = 4096):
    """A float64 reference, an eager result off by noise of 1e-5 relative (well over float32's rounding), and a
    'compiled' result `compiled_scale` times as far."""
    torch.manual_seed(0)
    ref = torch.randn(n, dtype=torch.float64)
    noise = 1e-5 * ref * torch.randn(n, dtype=torch.float64)
    return ref, (ref + noise).float(), (ref + compiled_scale * noise).float()


def test_a_result_twice_eagers_error_passes_and_ten_times_fails():
    ref, eager, near = _results(2.0)
    _, _, far = _results(10.0)
    assert too_far(errors_against(["out"], [ref], [eager], [near])) == []
    bad = too_far(errors_against(["out"], [ref], [eager], [far]))
    assert [e.name for e in bad] == ["out"] and 9 < bad[0].ratio < 11


def test_a_disagreement_with_eager_is_fine_when_eager_is_the_one_off():
    torch.manual_seed(1)
    ref = torch.randn(1000, dtype=torch.float64)
    eager = (ref * (1 + 1e-4)).float()  # eager off by 1e-4 relative (an approximate kernel)
    compiled = ref.float()  # exact to float32
    errors = errors_against(["out"], [ref], [eager], [compiled])
    assert too_far(errors) == [] and errors[0].compiled < errors[0].eager
    assert too_far(errors_against(["out"], [ref], [compiled], [eager]))  # the other way round it is not


def test_a_tensor_zero_in_exact_arithmetic_is_judged_at_the_noise_of_the_others():
    # a gradient that is zero in exact arithmetic comes out as rounding noise in float32: both runs' noise differs,
    # neither is wrong while it is under a few ulps of the largest result
    ref = [torch.randn(100, dtype=torch.float64) * 10, torch.zeros(8, dtype=torch.float64)]
    eager = [ref[0].float(), torch.full((8,), 1e-7)]
    compiled = [ref[0].float(), torch.full((8,), -5e-7)]
    assert too_far(errors_against(["weight", "bias"], ref, eager, compiled)) == []
    compiled[1] = torch.full((8,), 1e-3)
    assert [e.name for e in too_far(errors_against(["weight", "bias"], ref, eager, compiled))] == ["bias"]
