"""Float32 mm/addmm externs on oneDNN's matmul (`_gemm.py`, option `cpp.gemm`): the same values as eager's in every
operand layout a linear layer and its gradients give, only where the form allows, and, under "measure", where the
timing stored on disk says so."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from ember_codegen_cpp import CppCodegen, _gemm
from ember_core import record_events
from helpers import clone, trace

pytestmark = pytest.mark.skipif(not _gemm.available(), reason="this torch has no oneDNN")


def compiled(fn, inputs, how, mode="fake"):
    with record_events() as rec:
        out = CppCodegen().compile(trace(fn, *inputs, mode=mode), list(inputs), {"cpp.gemm": how})
        got = out(clone(inputs))
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]
    for g, w in zip(got, fn(*clone(inputs))):
        torch.testing.assert_close(g, w)
    wrapper = out.source.split("# ---- wrapper (Python) ----\n")[1]
    return wrapper.split("\ndef ")[0], rec.kinds("kernel_tuned")  # the wrapper, without its profiled twin


def source_of(fn, inputs, how, mode="fake"):
    return compiled(fn, inputs, how, mode)[0]


def linear_and_gradients(x, w, b, g):
    """A linear layer (`addmm(b, x, w.t())`), the input's gradient (`mm(g, w)`), the weight's (`mm(g.t(), x)`, a
    transposed left operand), a product of contiguous operands and one of a slice (rows of a wider buffer)."""
    return F.linear(x, w, b), g @ w, g.t() @ x, x @ w.t().contiguous(), x[:, 3:35] @ w[:, 3:35].t()


def layer_inputs():
    return torch.randn(24, 40), torch.randn(16, 40), torch.randn(16), torch.randn(24, 16)


def test_every_layout_of_a_linear_layer_and_its_gradients_gives_eagers_values_on_onednn():
    source = source_of(linear_and_gradients, layer_inputs(), "onednn")
    assert source.count("= _onednn_linear0(") == 5, source
    assert "= _op" not in source, source  # no ATen call left


def test_option_aten_keeps_atens_matmul():
    source = source_of(linear_and_gradients, layer_inputs(), "aten")
    assert "_onednn_linear" not in source


@pytest.mark.parametrize("fn,inputs", [
    (lambda a, b: (a @ b,), (torch.randn(8, 6, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64))),
    (lambda c, a, b: (torch.addmm(c, a, b, beta=0.5),), (torch.randn(4), torch.randn(8, 6), torch.randn(6, 4))),
    (lambda c, a, b: (torch.addmm(c, a, b),), (torch.randn(8, 4), torch.randn(8, 6), torch.randn(6, 4))),
    (lambda a, b: (torch.bmm(a, b),), (torch.randn(2, 8, 6), torch.randn(2, 6, 4))),
    (lambda a, b: (a @ b,), (torch.randn(0, 6), torch.randn(6, 4))),
], ids=["float64", "beta", "bias_2d", "bmm", "empty"])
def test_what_onednns_linear_does_not_compute_stays_on_aten(fn, inputs):
    assert "_onednn_linear" not in source_of(fn, inputs, "onednn")


def test_symbolic_sizes_stay_on_aten():
    fn = lambda a, b: (a @ b,)  # noqa: E731
    assert "_onednn_linear" not in source_of(fn, (torch.randn(8, 6), torch.randn(6, 4)), "onednn", mode="symbolic")


def test_without_onednn_every_matmul_stays_on_aten(monkeypatch):
    monkeypatch.setattr(_gemm, "available", lambda: False)
    assert "_onednn_linear" not in source_of(linear_and_gradients, layer_inputs(), "onednn")


def big(a, b):
    return (a @ b,)


def test_measure_times_a_product_once_and_follows_the_choice_kept_on_disk(monkeypatch):
    monkeypatch.setattr(_gemm, "_chosen", {})
    inputs = torch.randn(128, 96), torch.randn(96, 112)  # 1.4M multiply-adds: over MIN_MACS
    source, tuned = compiled(big, inputs, "measure")
    assert [e.data["candidates"] for e in tuned] == [[[0], [1]]] and tuned[0].stage == "codegen-cpp"
    assert ("_onednn_linear" in source) == (tuned[0].data["choice"] == [1])
    key = tuned[0].data["key"]
    for choice, on_onednn in ((_gemm.ATEN, False), (_gemm.ONEDNN, True)):  # a new process reads the disk's choice
        monkeypatch.setattr(_gemm, "_chosen", {})
        _gemm.TUNER.store(key, choice, "matmul")
        source, tuned = compiled(big, inputs, "measure")
        assert not tuned and ("_onednn_linear" in source) == on_onednn


def test_measure_leaves_a_small_product_on_aten_untimed(monkeypatch):
    monkeypatch.setattr(_gemm, "_chosen", {})
    source, tuned = compiled(big, (torch.randn(32, 32), torch.randn(32, 32)), "measure")
    assert not tuned and "_onednn_linear" not in source
