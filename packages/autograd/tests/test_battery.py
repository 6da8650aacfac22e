"""ember-core's graph battery through joint → save-everything partition → wrap: outputs and gradients equal eager."""

from __future__ import annotations

import pytest
import torch
from _support import assert_same_grads, cotangents, grads_of, interpreted, save_everything
from ember_autograd import joint, wrap
from ember_core.testing import battery_case, battery_names


def with_grad(inputs):
    return [x.detach().clone().requires_grad_(x.dtype.is_floating_point) if isinstance(x, torch.Tensor) else x
            for x in inputs]


@pytest.mark.parametrize("name", battery_names())
def test_battery_case_matches_eager(name):
    case = battery_case(name)
    jg = joint(case.graph, with_grad(case.inputs))
    part = save_everything(jg)
    run = wrap(part, interpreted(part.forward), lambda: interpreted(part.backward))
    for inputs in case.input_sets():
        leaves_c, leaves_e = with_grad(inputs), with_grad(inputs)
        actual = run(leaves_c)
        # the reference may mutate its inputs in place: give it non-leaf copies
        expected = list(case.reference(*[x * 1 if isinstance(x, torch.Tensor) and x.requires_grad else x
                                         for x in leaves_e]))
        torch.testing.assert_close(actual, expected)
        cts = cotangents(expected)
        wrt_c = [x for x in leaves_c if isinstance(x, torch.Tensor) and x.requires_grad]
        wrt_e = [x for x in leaves_e if isinstance(x, torch.Tensor) and x.requires_grad]
        assert_same_grads(grads_of(actual, wrt_c, cts), grads_of(expected, wrt_e, cts))
