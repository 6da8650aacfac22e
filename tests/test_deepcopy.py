"""`copy.deepcopy` of a compiled module, as of a `torch.compile`d one (EMA weights, model soups, checkpoint
averaging copy the compiled model): it failed with "cannot pickle 'module' object" (the compiler's plugin manager
was copied too). The copy has its own parameters, computes with them, and shares the compiler."""

from __future__ import annotations

import copy

import ember
import pytest
import torch


@pytest.mark.parametrize("options", [{"frontend": "dynamo"}, {"frontend": "trace"},
                                     {"frontend": "dynamo", "compiled_autograd": True}], ids=str)
def test_a_compiled_module_deep_copies_with_its_own_parameters(options):
    """The copy first computed with the original's parameters under the trace frontend (its compiled function
    reads the module it was made for): a wrong number. Now a copy is compiled again for its own module."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    compiled = ember.compile(model, options=options)
    compiled(x)
    twin = copy.deepcopy(compiled)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    torch.testing.assert_close(twin(x), twin._orig_mod(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert not torch.equal(twin(x), compiled(x))
