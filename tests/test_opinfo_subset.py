"""A fixed, varied handful of torch's OpInfos through the OpInfo sweep's harness (tests/opinfo), forward and backward
in float32 (a few in bfloat16 and float16), compared with eager. A case that fails without a line in the
expected-failures list fails the test, a case whose graph did not build, lower or print (status `fallback`)
included, and so does a listed case that passes (delete its line). The whole table runs with `nox -s opinfo`."""

from __future__ import annotations

import pytest
import torch
from opinfo import cases, expected

# Pointwise, broadcasting, reductions, normalizations, matmul and conv, pooling, views and indexing, sorting, scans,
# losses, random ops, a graph break, and ops that failed when the sweep began (linalg.inv, zero_, rrelu's silently
# zero gradient, linear_cross_entropy's chunked custom op, kron's rounding, view_as_complex's dtype; fixed since),
# or under torch 2.14 (norms' NaN gradients at zero, take's 0-d index and its gather that did not build, narrow's
# 0-d start; take's and narrow's lowering fallbacks are listed, by design): about a minute on two cores with a cold
# build cache.
SUBSET = [
    "add", "mul", "div.no_rounding_mode", "sin", "exp", "tanh", "sigmoid", "pow", "where", "clamp",
    "sum", "mean", "amax", "max.reduction_with_dim", "var", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.relu",
    "mm", "bmm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.normalize", "nn.functional.max_pool2d", "nn.functional.interpolate.bilinear",
    "cat", "reshape", "permute", "expand", "index_select", "gather", "masked_select", "cumsum", "sort", "topk",
    "nn.functional.embedding", "nn.functional.cross_entropy", "nn.functional.dropout",
    "linalg.inv", "zero_", "nn.functional.rrelu", "nn.functional.linear_cross_entropy.chunked", "kron",
    "view_as_complex", "norm", "linalg.norm", "linalg.norm.subgradients_at_zero", "take", "narrow",
]


# bfloat16 batch norm's running stats, which the op writes into its inputs: torch's meta functions give them in float32
# where ATen's CPU kernel returns bfloat16, and kernels read an extern's bfloat16 bytes as float32 (off by 4.2 to
# 6.9e29). Forward only: the write is the same in both phases.
BFLOAT16_SUBSET = ["_batch_norm_with_update", "_native_batch_norm_legit"]


def assert_cases_pass(key, dtype, phases, count=cases.SAMPLES):
    results = list(cases.run_op(cases.find_op(key), dtype, phases, count=count))
    assert results, f"{key}: no case ran"
    verdict = expected.check(results, expected.load())
    assert verdict.ok, "\n".join(verdict.lines())


@pytest.mark.parametrize("key", SUBSET)
def test_op_matches_eager(key):
    assert_cases_pass(key, "float32", cases.PHASES)


@pytest.mark.parametrize("key", BFLOAT16_SUBSET)
def test_op_and_what_it_writes_into_its_inputs_match_eager_in_bfloat16(key):
    assert_cases_pass(key, "bfloat16", ("forward",))


# float16 (`python -m tests.opinfo run --dtype float16`, first run at 76b7dce: 1915 cases, one mismatch besides
# narrow's listed fallback): addcdiv with a value, which Dynamo wrote as three ops each rounding to float16 where
# eager's kernel rounds once (fixed); a few pointwise ops, a reduction and a norm
FLOAT16_SUBSET = ["addcdiv", "addcmul", "add", "exp", "sum", "nn.functional.layer_norm", "nn.functional.gelu"]


@pytest.mark.parametrize("key", FLOAT16_SUBSET)
def test_op_matches_eager_in_float16(key):
    assert_cases_pass(key, "float16", cases.PHASES)


# ops whose gradient through a decomposition differed from eager's where inputs on a grid put them at ties, met
# margins, zeros or probabilities of exactly 0 and 1 (`python -m tests.opinfo run --grid 0.5` found them; fixed)
ON_A_GRID = ["nn.functional.binary_cross_entropy", "nn.functional.multi_margin_loss",
             "nn.functional.multilabel_margin_loss", "special.xlog1py", "nn.functional.hardswish",
             "nn.functional.softshrink"]


@pytest.mark.parametrize("key", ON_A_GRID)
def test_op_on_a_grid_matches_eagers_gradient(key, monkeypatch):
    monkeypatch.setattr(cases, "GRID", 0.5)
    assert_cases_pass(key, "float32", ("backward",), count=4)


# every input in other memory (`python -m tests.opinfo run --layout L`: the whole backward sweep found no mismatch in
# either layout): kernels that index by strides and storage offsets, scans and products over the strided dims
IN_OTHER_LAYOUTS = ["index_add", "cumsum", "nn.functional.conv2d", "addmm"]


@pytest.mark.parametrize("layout", cases.LAYOUTS)
@pytest.mark.parametrize("key", IN_OTHER_LAYOUTS)
def test_op_on_inputs_in_other_layouts_matches_eager(key, layout, monkeypatch):
    monkeypatch.setattr(cases, "LAYOUT", layout)
    assert_cases_pass(key, "float32", ("backward",), count=1)


# each op compiled once with dynamic=True for all its samples (`python -m tests.opinfo run --dynamic`): a negative
# int index (select, slice), int inputs the joint trace's ShapeEnv names like other symbols (conv2d, avg_pool2d,
# movedim), ints a backward fixes or compares in C++ (pow, celu), a modulo of sizes as an ATen call's argument
# (roll, fftshift), a specialized slice_scatter whose trace fails (a visible fallback), pads and SDPA
DYNAMIC = ["select", "slice", "roll", "fft.fftshift", "nn.functional.conv2d", "nn.functional.avg_pool2d",
           "slice_scatter", "nn.functional.pad.constant", "nn.functional.pad.replicate_negative", "movedim", "pow",
           "nn.functional.celu", "nn.functional.scaled_dot_product_attention"]


@pytest.mark.parametrize("key", DYNAMIC)
def test_op_compiled_once_for_all_its_samples_with_dynamic_shapes_matches_eager(key, monkeypatch):
    monkeypatch.setattr(cases, "DYNAMIC", True)
    assert_cases_pass(key, "float32", cases.PHASES)


@pytest.mark.parametrize("layout", cases.LAYOUTS)
def test_relaid_inputs_keep_their_values_in_other_memory(layout):
    t = torch.arange(24.0).reshape(2, 3, 4)
    moved = cases.relaid(t, layout)
    assert torch.equal(moved, t) and not moved.is_contiguous()
    if layout == "noncontiguous":  # strides doubled, from offset 1, NaN between the elements
        assert moved.stride() == (24, 8, 2) and moved.storage_offset() == 1
        assert torch.isnan(moved.as_strided((24,), (2,), 0)).all()
    else:
        assert moved.stride() == (12, 1, 3)
    assert cases.relaid(torch.ones(3), "transposed").is_contiguous()  # a vector has no two dims to swap
    sparse = torch.eye(3).to_sparse()
    assert cases.relaid(sparse, layout) is sparse
    with pytest.raises(ValueError, match="unknown layout"):
        cases.relaid(t, "diagonal")


def test_chunked_linear_cross_entropy_gradient_matches_eager_in_bfloat16():
    """Its bfloat16 gradient lost the last chunk's rows (6 of 24 elements off, no error): gcc miscompiled the
    kernel that scatters them (codegen-cpp's GCC_FLAGS)."""
    assert_cases_pass("nn.functional.linear_cross_entropy.chunked_none", "bfloat16", cases.PHASES)


def test_expected_failures_list_names_real_cases():
    listed = expected.load()
    keys = {cases.op_key(op) for op in cases.op_db()}
    unknown = sorted({op for op, *_ in listed} - keys)
    assert not unknown, f"expected_failures.txt names ops op_db does not have: {unknown}"
    assert all(sample < cases.SAMPLES for *_, sample in listed)


@pytest.mark.parametrize("line, why", [
    ("sin float32 forward 0", "expected op dtype phase sample class reason"),
    ("sin float32 forward 0 mismatch", "the reason is missing"),
    ("sin float32 forward 0 mismatch ab", "the reason is missing"),
    ("sin float64 forward 0 mismatch a reason", "dtype is one of"),
    ("sin float32 sideways 0 mismatch a reason", "phase is one of"),
    ("sin float32 forward -1 mismatch a reason", "sample is"),
    ("sin float32 forward 0 Mismatch! a reason", "class is"),
    ("__import__('os') float32 forward 0 mismatch a reason", "op key"),
])
def test_expected_failures_parse_strictly(line, why):
    with pytest.raises(expected.ExpectedFileError, match=why) as info:
        expected.parse(f"# header\n{line}\n", "list.txt")
    assert "list.txt:2" in str(info.value)


def test_expected_failures_refuse_a_repeated_case():
    with pytest.raises(expected.ExpectedFileError, match="listed twice"):
        expected.parse("sin float32 forward 0 mismatch why\nsin float32 forward 0 error-x why\n")


def test_check_reports_unexpected_failures_and_passes():
    def result(sample, status):
        return cases.CaseResult("sin", "", sample, "float32", "forward", status,
                                klass="mismatch" if status == "fail-mismatch" else "")

    listed = expected.parse("sin float32 forward 0 mismatch off by one\nsin float32 forward 1 mismatch off by two\n")
    verdict = expected.check([result(0, "pass"), result(1, "fail-mismatch"), result(2, "fail-mismatch")], listed)
    assert [case[0] for case in verdict.unexpected_passes] == [("sin", "float32", "forward", 0)]
    assert [r.sample for r in verdict.unexpected_failures] == [2]
    assert not verdict.ok
    assert expected.parse(expected.render(expected.updated(listed, [result(0, "pass")]))) == \
        {("sin", "float32", "forward", 1): expected.Listed("mismatch", "off by two")}


def test_every_listed_case_has_a_reason_a_person_wrote():
    unexplained = [key for key, entry in expected.load().items() if entry.reason.startswith("unexplained")]
    assert not unexplained, f"--update-expected added these; write why each fails: {unexplained}"


def test_a_graph_that_did_not_compile_fails_its_case_unless_listed():
    """A case whose numbers match eager's but whose graph did not build or lower (the interpreter codegen ran it)
    is a `fallback` failure; a fallback by design (a graph break, eager autograd) is not."""
    def result(fallbacks):
        r = cases.CaseResult("sin", "", 0, "float32", "forward", "pass", fallbacks=fallbacks)
        cases.fail_on_fallbacks(r)
        r.klass = cases.classify(r) if r.failed else ""
        return r

    built = result([["codegen-cpp", "build", "the build failed"]])
    lowered = result([["codegen-cpp", "lowering", "lowering failed"]])
    by_design = result([["capture", "eager", "a graph break"], ["autograd", "autograd", "eager autograd"]])
    assert (built.klass, lowered.klass, by_design.status) == ("build-fallback", "lowering-fallback", "pass")
    verdict = expected.check([built, by_design], {})
    assert verdict.unexpected_failures == [built] and not verdict.ok
    listed = expected.parse("sin float32 forward 0 build-fallback the build fails, on purpose\n")
    assert expected.check([built], listed).ok


def test_a_line_may_hold_under_some_torch_versions_only():
    listed = expected.parse("take float32 forward 2 lowering-fallback torch>=2.14 Dynamo reads the 0-d index\n"
                            "sin float32 forward 0 mismatch torch<2.14 an older decomposition\n")
    failed = cases.CaseResult("take", "", 2, "float32", "forward", "fallback", klass="lowering-fallback")
    passed = cases.CaseResult("take", "", 2, "float32", "forward", "pass")
    assert expected.check([failed], listed, torch_version=(2, 14)).ok
    assert not expected.check([failed], listed, torch_version=(2, 13)).ok  # not listed there: unexpected
    assert expected.check([passed], listed, torch_version=(2, 13)).ok  # nor an unexpected pass
    assert not expected.check([passed], listed, torch_version=(2, 15)).ok
    sin = cases.CaseResult("sin", "", 0, "float32", "forward", "pass")
    assert expected.check([sin], listed, torch_version=(2, 14)).ok and not expected.check([sin], listed, (2, 13)).ok


def test_a_float32_miss_passes_only_when_float64_says_ember_is_right():
    """layer_norm over one element: its input gradient is mathematically 0, the rounding residue of terms 1/sqrt(eps)
    times larger; eager's float32 kernel leaves 3e-5 of it under some ATen vector kernels (ATEN_CPU_CAPABILITY=
    default), ember 0. Beyond float32's tolerance of each other, judged against the float64 run: ember's value must
    match it at the tolerances and be no further from it than eager's."""
    atol, rtol = 1e-5, 1.3e-6
    eager, ref = torch.tensor([3.0517578125e-05]), torch.zeros(1, dtype=torch.float64)
    assert cases.compare(torch.zeros(1), eager, atol, rtol, "grad") is not None  # a miss, without a reference
    assert cases.compare(torch.zeros(1), eager, atol, rtol, "grad", ref) is None
    for wrong in (1.0, -3.1e-5, -1e-3):  # off, or as far from float64 as eager but the other way, beyond tolerance
        assert "max error against float64" in cases.compare(torch.tensor([wrong]), eager, atol, rtol, "grad", ref)
    # an op whose float32 result differs from its float64 one by design (nan_to_num's largest finite value): a
    # wrong value no further from float64's than eager's is not right
    big = torch.tensor([torch.finfo(torch.float32).max])
    huge = torch.tensor([torch.finfo(torch.float64).max], dtype=torch.float64)
    assert "beyond the tolerances" in cases.compare(torch.zeros(1), big, atol, rtol, "output", huge)
