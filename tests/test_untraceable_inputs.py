"""Inputs ember cannot trace (quantized, sparse, nested tensors) run eagerly with the true reason, in both
frontends and in `ember.explain`. The trace frontend crashed on a quantized input and blamed a sparse one for "its
shape or strides changed in place"; under Dynamo, explain said "0 graphs ... 0 fallbacks" and no reason."""

from __future__ import annotations

import warnings

import ember
import pytest
import torch

KINDS = {
    "quantized": (lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8), "a quantized tensor"),
    "sparse": (lambda: torch.randn(4, 4).to_sparse(), "a sparse tensor"),
    "nested": (lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]), "a nested tensor"),
}


def f(x):
    if x.is_quantized:
        return x.dequantize() * 2
    if x.is_nested:
        return x.to_padded_tensor(0.0) * 2
    return x.to_dense() * 2


def made(kind: str) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated, nested ones a prototype
        return KINDS[kind][0]()


@pytest.mark.parametrize("kind", KINDS)
def test_the_trace_frontend_runs_it_eagerly_saying_what_the_input_is(kind):
    x = made(kind)
    with pytest.warns(ember.FallbackWarning, match=f"input 'x' is {KINDS[kind][1]}"):
        out = ember.compile(f, options={"frontend": "trace"})(x)
    torch.testing.assert_close(out, f(x))


@pytest.mark.parametrize("frontend", ["trace", "dynamo"])
@pytest.mark.parametrize("kind", KINDS)
def test_explain_reports_the_fallback_and_its_reason(kind, frontend):
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ember.explain(f, made(kind), options={"frontend": frontend})
    assert len(report.fallbacks) == 1, str(report)
    assert KINDS[kind][1] in report.fallbacks[0].reason and "changed in place" not in report.fallbacks[0].reason


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("as_module", [False, True])
def test_dynamo_says_once_why_the_call_runs_eagerly(kind, as_module):
    """Dynamo runs such a call eagerly without calling ember's backend: ember heard nothing and said nothing (no
    event, no warning). Now the Dynamo frontend reports it once, naming the input and what it is."""
    torch._dynamo.reset()

    class M(torch.nn.Module):
        def forward(self, x):
            return f(x)

    compiled = ember.compile(M() if as_module else f)
    x = made(kind)
    with ember.record_events() as rec, pytest.warns(ember.FallbackWarning, match=f"input 'x' is {KINDS[kind][1]}"):
        out = compiled(x)
        compiled(x)
    torch.testing.assert_close(out, f(x))
    fallbacks = [e for e in rec.events if e.kind == "fallback"]
    assert len(fallbacks) == 1 and fallbacks[0].data["cause"] == "eager", [e.message for e in rec.events]
    assert KINDS[kind][1] in fallbacks[0].data["reason"]


def g(x):
    s = x.to_sparse()
    return (s * 2).to_dense() + 1


@pytest.mark.parametrize("frontend", ["trace", "dynamo"])
def test_a_sparse_value_made_inside_the_function_is_never_compiled_as_a_dense_one(frontend):
    """The trace frontend recorded `x.to_sparse()` as a dense value with strides (0, 0), and the C++ codegen compiled
    `s * 2` as a kernel over it, which raised ("Cannot access data pointer of Tensor that doesn't have storage").
    A graph's values are dense, strided tensors: such a value is now refused where it is recorded, and that part of
    the program runs eagerly, saying why."""
    torch._dynamo.reset()
    x = torch.randn(4, 4)
    with ember.record_events() as rec, warnings.catch_warnings():
        warnings.simplefilter("ignore", ember.FallbackWarning)
        out = ember.compile(g, options={"frontend": frontend})(x)
    torch.testing.assert_close(out, g(x))
    reasons = [e.data["reason"] for e in rec.events if e.kind == "fallback"]
    if frontend == "trace":
        assert len(reasons) == 1 and "a sparse tensor" in reasons[0], reasons
