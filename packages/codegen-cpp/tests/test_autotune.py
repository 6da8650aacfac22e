"""mode="max-autotune": each kernel printed in several variants, measured on the first call, the choice kept on disk
per kernel and CPU and reused by a new codegen; results equal eager's whatever variant wins."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_cpp import Builder, CppCodegen, KernelPrinter
from ember_codegen_cpp._autotune import TUNER
from ember_codegen_cpp._variants import SERIAL, Variant
from ember_core import record_events
from ember_lowering import lower
from ember_lowering.codegen import PlanLayout
from helpers import clone, trace

TUNE = {"mode": "max-autotune"}


def softmax_and_sums(x, y):
    s = torch.softmax(x, -1)
    return s * 2, s.sum(0), (y.exp() + 1).sum(-1), torch.sigmoid(y) * y


def args():
    return torch.randn(64, 300), torch.randn(100, 200)


def tuned(fn, inputs, options=TUNE, mode="fake"):
    with record_events() as rec:
        compiled = CppCodegen().compile(trace(fn, *inputs, mode=mode), list(inputs), options)
        out = compiled(clone(inputs))
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]
    return compiled, out, rec.kinds("kernel_tuned")


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_tuned_kernels_match_eager_and_every_measured_kernel_stores_its_choice(mode):
    inputs = args()
    compiled, out, events = tuned(softmax_and_sums, inputs, {"mode": mode})
    for got, want in zip(out, softmax_and_sums(*inputs)):
        torch.testing.assert_close(got, want)
    assert "ember_try_" in compiled.source and "_tune_ember_seg0.pending" in compiled.source
    for e in events:
        candidates = [tuple(c) for c in e.get("candidates")]
        assert tuple(e.get("choice")) in candidates and TUNER.stored(e.get("key"), candidates)
        assert len(e.get("seconds")) == len(e.get("candidates"))
    out2 = compiled(clone(inputs))  # later calls run the picked variants, no measuring
    for got, want in zip(out2, softmax_and_sums(*inputs)):
        torch.testing.assert_close(got, want)


def test_without_the_mode_one_variant_per_kernel_and_no_tuning():
    compiled, _, events = tuned(softmax_and_sums, args(), {})
    assert not events and "ember_try_" not in compiled.source and "_tune_" not in compiled.source


def test_a_stored_choice_is_reused_and_one_that_is_no_candidate_is_measured_again(monkeypatch):
    def fn(x):
        return (torch.tanh(x) * x,)

    x = torch.randn(257, 129)
    tuned(fn, (x,))
    measured = []
    monkeypatch.setattr(TUNER, "_time", lambda *a: measured.append(1) or 1.0)
    _, out, events = tuned(fn, (x,))  # a new codegen: the choice comes from disk
    torch.testing.assert_close(out[0], fn(x)[0])
    assert measured == [] and events == []

    plan = lower(trace(fn, x))
    layout = PlanLayout(plan)
    kernel = plan.kernels[0]
    for key in {p.stem for p in TUNER.cache.directory.glob("*.choice")}:
        TUNER.store(key, (7, 7, 7), "k")  # well formed, verified by the cache, but no variant any kernel has
    _, out, events = tuned(fn, (x,))
    torch.testing.assert_close(out[0], fn(x)[0])
    assert measured and len(events) == 1
    assert (7, 7, 7) not in [c.choice for c in KernelPrinter(kernel, layout, "k").variants(True)]


def test_a_stored_choice_that_is_not_a_list_of_integers_is_ignored():
    key = "0" * 40
    for text in (b'{"par_min": 1}', b'["__import__(\'os\')"]', b"[1, 2.5, 3]", b"not json"):
        with TUNER.cache.lock(key):
            TUNER.cache.store(key, {"choice": text}, {})
        assert TUNER.stored(key, [(0, 1, 0)]) is None
    TUNER.store(key, (0, 1, 0), "k")
    assert TUNER.stored(key, [(0, 1, 0), (4096, 1, 0)]) == (0, 1, 0)


def test_symbolic_sizes_are_passed_to_the_variants():
    def fn(x):
        return (torch.softmax(x, -1), x.sum(0), x * 3)

    x = torch.randn(40, 2100)
    compiled, out, _ = tuned(fn, (x,), mode="symbolic")
    for got, want in zip(out, fn(x)):
        torch.testing.assert_close(got, want)
    y = torch.randn(7, 2100)
    for got, want in zip(compiled([y]), fn(y)):
        torch.testing.assert_close(got, want)


def test_variants_start_with_the_heuristics_and_differ_in_the_printed_kernel():
    x = torch.randn(64, 300)
    plan = lower(trace(lambda x: (torch.sigmoid(x) * 2, x.sum(0)), x))
    layout = PlanLayout(plan)
    for kernel in plan.kernels:
        printer = KernelPrinter(kernel, layout, "k")
        variants = printer.variants(True)
        assert variants[0] == Variant() and len(set(variants)) == len(variants)
        assert Variant(par_min=SERIAL) in variants and Variant(vector_bits=256) in variants
        assert Variant(vector_bits=256) not in printer.variants(False)
        texts = {KernelPrinter(kernel, layout, "k", v).print().text for v in variants}
        assert len(texts) == len(variants)
        default = KernelPrinter(kernel, layout, "k", Variant()).print().text
        assert KernelPrinter(kernel, layout, "k").print().text == default


def test_a_kernel_that_calls_a_libm_function_keeps_the_native_vector_width():
    """libmvec's 8- and 16-lane tanh are different code, an ulp apart at some values; a forward kernel and the
    backward's recomputation of the same values must agree bit for bit, so no such kernel is tried 256 bits wide."""
    x = torch.randn(64, 300)
    for fn, wide in ((lambda x: torch.tanh(x) * 2, False), (lambda x: x.pow(x), False),
                     (lambda x: torch.sigmoid(x) * 2, True)):  # ember's own exp: the same bits at every width
        plan = lower(trace(fn, x))
        [kernel] = plan.kernels
        assert (Variant(vector_bits=256) in KernelPrinter(kernel, PlanLayout(plan), "k").variants(True)) == wide


def test_static_sizes_try_the_other_side_of_the_fork_and_the_threshold_is_the_preludes():
    from ember_codegen_cpp import prelude
    from ember_codegen_cpp._prelude import PAR_MIN

    assert f"#define EMBER_PAR_MIN {PAR_MIN}\n" in prelude()
    small, large = torch.randn(8, 100), torch.randn(64, 300)
    for x, other in ((small, Variant(par_min=1)), (large, Variant(par_min=SERIAL))):
        plan = lower(trace(lambda x: (torch.sigmoid(x) * 2,), x))
        variants = KernelPrinter(plan.kernels[0], PlanLayout(plan), "k").variants(False)
        assert variants[:2] == [Variant(), other] and Variant(par_min=4096) not in variants


def test_tuning_picks_variants_in_every_part_of_a_split_unit():
    def chain(x, w):
        y = torch.softmax(x, -1) @ w
        return (torch.softmax(y * 2, -1).sum(0),)

    inputs = (torch.randn(64, 300), torch.randn(300, 300))
    codegen = CppCodegen(Builder(part_lines=20, workers=2))
    with record_events() as rec:
        compiled = codegen.compile(trace(chain, *inputs), list(inputs), TUNE)
        out = compiled(clone(inputs))
    assert not rec.kinds("fallback") and "part 2 of 2" in compiled.source
    tuned_kernels = {e.get("kernel").split("_")[0] for e in rec.kinds("kernel_tuned")}
    assert "k0" in tuned_kernels and len(tuned_kernels) >= 2  # the kernels of both parts (split by the matmul)
    torch.testing.assert_close(out[0], chain(*inputs)[0])
    torch.testing.assert_close(compiled(clone(inputs))[0], chain(*inputs)[0])


@pytest.mark.parametrize("fn", [
    lambda x, y, i: (torch.cat([x, y], 0).sum(0),),  # outer-contiguous: a block's masks and loads hoisted
    lambda x, y, i: ((x[i] * y[:8]).sum(-1), torch.softmax(y * x[:40], -1)),  # a gather; a row stashed
    lambda x, y, i: (torch.where(y > 0, x[:40], y).sum(0) + x[0],),
], ids=["cat-columns", "gather-softmax", "where-columns"])
def test_every_variant_of_a_kernel_takes_its_parameters_as_the_default_does(fn):
    """The dispatch calls the chosen variant with the default's arguments: a variant listing its buffers in
    another order would read one as another (its parameters follow the loop IR, not the printed text)."""
    inputs = torch.randn(48, 64), torch.randn(40, 64), torch.randint(0, 48, (8,))
    plan = lower(trace(fn, *inputs))
    layout = PlanLayout(plan)
    tried = 0
    for kernel in plan.kernels:
        default = KernelPrinter(kernel, layout, "k").print()
        for v in KernelPrinter(kernel, layout, "k").variants(True)[1:]:
            other = KernelPrinter(kernel, layout, "k", v).print()
            assert other.roots == default.roots and _params(other.text) == _params(default.text)
            tried += 1
    assert tried
    compiled, out, _ = tuned(fn, inputs)
    for got, want in zip(out, fn(*inputs)):
        torch.testing.assert_close(got, want)


def _params(text: str) -> str:
    return text.split("static int k(", 1)[1].split(") {", 1)[0]
