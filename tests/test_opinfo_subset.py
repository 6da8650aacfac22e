"""A fixed, varied handful of torch's OpInfos through the OpInfo sweep's harness (tests/opinfo), forward and backward
in float32 (a few forward in bfloat16), compared with eager. A case that fails without a line in the expected-failures
list fails the test, and so does a listed case that passes (delete its line). The whole table runs with
`nox -s opinfo`."""

from __future__ import annotations

import pytest
from opinfo import cases, expected

# Pointwise, broadcasting, reductions, normalizations, matmul and conv, pooling, views and indexing, sorting, scans,
# losses, random ops, a graph break, and ops that failed when the sweep began (linalg.inv, zero_, rrelu's silently
# zero gradient, linear_cross_entropy's chunked custom op, kron's rounding, view_as_complex's dtype; fixed since):
# about a minute on two cores with a cold build cache.
SUBSET = [
    "add", "mul", "div.no_rounding_mode", "sin", "exp", "tanh", "sigmoid", "pow", "where", "clamp",
    "sum", "mean", "amax", "max.reduction_with_dim", "var", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.relu",
    "mm", "bmm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.normalize", "nn.functional.max_pool2d", "nn.functional.interpolate.bilinear",
    "cat", "reshape", "permute", "expand", "index_select", "gather", "masked_select", "cumsum", "sort", "topk",
    "nn.functional.embedding", "nn.functional.cross_entropy", "nn.functional.dropout",
    "linalg.inv", "zero_", "nn.functional.rrelu", "nn.functional.linear_cross_entropy.chunked", "kron",
    "view_as_complex",
]


# bfloat16 batch norm's running stats, which the op writes into its inputs: torch's meta functions give them in float32
# where ATen's CPU kernel returns bfloat16, and kernels read an extern's bfloat16 bytes as float32 (off by 4.2 to
# 6.9e29). Forward only: the write is the same in both phases.
BFLOAT16_SUBSET = ["_batch_norm_with_update", "_native_batch_norm_legit"]


def assert_cases_pass(key, dtype, phases):
    results = list(cases.run_op(cases.find_op(key), dtype, phases))
    assert results, f"{key}: no case ran"
    verdict = expected.check(results, expected.load())
    assert verdict.ok, "\n".join(verdict.lines())


@pytest.mark.parametrize("key", SUBSET)
def test_op_matches_eager(key):
    assert_cases_pass(key, "float32", cases.PHASES)


@pytest.mark.parametrize("key", BFLOAT16_SUBSET)
def test_op_and_what_it_writes_into_its_inputs_match_eager_in_bfloat16(key):
    assert_cases_pass(key, "bfloat16", ("forward",))


def test_expected_failures_list_names_real_cases():
    listed = expected.load()
    keys = {cases.op_key(op) for op in cases.op_db()}
    unknown = sorted({op for op, *_ in listed} - keys)
    assert not unknown, f"expected_failures.txt names ops op_db does not have: {unknown}"
    assert all(sample < cases.SAMPLES for *_, sample in listed)


@pytest.mark.parametrize("line, why", [
    ("sin float32 forward 0", "expected 5 fields"),
    ("sin float64 forward 0 mismatch", "dtype is one of"),
    ("sin float32 sideways 0 mismatch", "phase is one of"),
    ("sin float32 forward -1 mismatch", "sample is"),
    ("sin float32 forward 0 Mismatch!", "class is"),
    ("__import__('os') float32 forward 0 mismatch", "op key"),
])
def test_expected_failures_parse_strictly(line, why):
    with pytest.raises(expected.ExpectedFileError, match=why) as info:
        expected.parse(f"# header\n{line}\n", "list.txt")
    assert "list.txt:2" in str(info.value)


def test_expected_failures_refuse_a_repeated_case():
    with pytest.raises(expected.ExpectedFileError, match="listed twice"):
        expected.parse("sin float32 forward 0 mismatch\nsin float32 forward 0 error-x\n")


def test_check_reports_unexpected_failures_and_passes():
    def result(sample, status):
        return cases.CaseResult("sin", "", sample, "float32", "forward", status,
                                klass="mismatch" if status == "fail-mismatch" else "")

    listed = expected.parse("sin float32 forward 0 mismatch\nsin float32 forward 1 mismatch\n")
    verdict = expected.check([result(0, "pass"), result(1, "fail-mismatch"), result(2, "fail-mismatch")], listed)
    assert [case[0] for case in verdict.unexpected_passes] == [("sin", "float32", "forward", 0)]
    assert [r.sample for r in verdict.unexpected_failures] == [2]
    assert not verdict.ok
    assert expected.parse(expected.render(expected.updated(listed, [result(0, "pass")]))) == \
        {("sin", "float32", "forward", 1): "mismatch"}
