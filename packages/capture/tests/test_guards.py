"""Generated guards: a fast boolean check and an explanation in words, from one list of checks."""

from __future__ import annotations

import pytest
import torch
from ember_capture._guards import GuardBuilder, GuardCodeError, shape_env_checks, tensor_checks, value_check
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext


def guard_for(x, k):
    g = GuardBuilder()
    g.let("a0", "flat[0]")
    tensor_checks(g, "a0", "x", x, torch.Tensor)
    g.let("a1", "flat[1]")
    value_check(g, "a1", "k", k)
    return g.build()


def test_guard_passes_on_equal_metadata_and_explains_each_difference():
    check, explain, source = guard_for(torch.zeros(10, 4), 3)
    assert check([torch.ones(10, 4), 3], None) and explain([torch.ones(10, 4), 3], None) is None
    cases = {
        "x: size of dim 0 changed from 10 to 8": [torch.zeros(8, 4), 3],
        "x: dtype changed from torch.float32 to torch.float64": [torch.zeros(10, 4, dtype=torch.float64), 3],
        "x: stride of dim 0 changed from 4 to 1": [torch.zeros(4, 10).t(), 3],
        "x: number of dims changed from 2 to 1": [torch.zeros(40), 3],
        "x: requires_grad changed from False to True": [torch.zeros(10, 4, requires_grad=True), 3],
        "k: changed from 3 to 4": [torch.zeros(10, 4), 4],
        "k: changed from 3 to 3.0": [torch.zeros(10, 4), 3.0],
        "x: type changed from Tensor to Parameter": [torch.nn.Parameter(torch.zeros(10, 4)), 3],
        "x: negative bit changed from False to True": [torch.zeros(10, 4, dtype=torch.complex64).conj().imag, 3],
    }
    for reason, flat in cases.items():
        assert not check(flat, None)
        assert explain(flat, None) == reason
    assert "a0.size() != (10, 4)" in source and source.startswith("def guard(flat, spec):")


def test_a_complex_tensor_is_guarded_on_its_conjugate_bit():
    z = torch.zeros(3, dtype=torch.complex64)
    check, explain, _ = guard_for(z, 1)
    assert check([z.clone(), 1], None)
    assert explain([z.conj(), 1], None) == "x: conjugate bit changed from False to True"


def test_objects_are_guarded_by_identity_and_errors_fail_the_guard():
    marker = object()
    g = GuardBuilder()
    g.let("a0", "flat[0]")
    value_check(g, "a0", "obj", marker)
    check, explain, _ = g.build()
    assert check([marker], None) and not check([object()], None)
    assert explain([object()], None) == "obj: is a different object"
    assert not check([], None) and explain([], None) == "a guard raised"


def test_shape_environment_guards_are_rewritten_over_locals():
    mode = FakeTensorMode(shape_env=ShapeEnv())
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC])
    fake = mode.from_tensor(torch.zeros(5), symbolic_context=context)
    g = GuardBuilder()
    g.let("a0", "flat[0]")
    tensor_checks(g, "a0", "x", fake, torch.Tensor)
    shape_env_checks(g, ["2 <= L['t0'].size()[0]"], {"t0": ("a0", "x")})
    check, explain, _ = g.build()
    assert check([torch.zeros(7)], None) and check([torch.zeros(2)], None)
    assert explain([torch.zeros(1)], None) == "shape guard failed: 2 <= x.size()[0]"


class _PrintsAsCode(int):
    def __repr__(self):
        return "__import__('os').system('true')"


def test_only_builtin_values_are_printed_into_the_code():
    g = GuardBuilder()
    assert [g.literal("C", v) for v in (None, True, 3, (1, 2), ())] == ["None", "True", "3", "(1, 2)", "()"]
    for value in (_PrintsAsCode(3), 2.5, "x", (1, _PrintsAsCode(2)), [1]):
        name = g.literal("C", value)
        assert name.isidentifier() and g.ns[name] is value


@pytest.mark.parametrize("code", [
    "a0.training is not True and __import__('os').system('true')",
    "a0.__class__", "open('f')", "(lambda: 1)()", "a0.size() != 'text'", "[x for x in flat]", "torch.load",
    "unknown_name",
])
def test_code_that_is_not_a_form_ember_writes_is_refused(code):
    g = GuardBuilder()
    g.let("a0", "flat[0]")
    with pytest.raises(GuardCodeError):
        g.check(code, "refused")
