"""ember-core's codegen conformance kit on the Triton codegen (kernels in Triton's interpreter), and the count of
kernels the printer leaves to the loop-IR interpreter over the battery: each one is a reported fallback."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_triton import TritonCodegen
from ember_core import record_events
from ember_core.testing import CodegenConformance, battery_case, battery_names
from ember_lowering.codegen import missing_reductions

# battery cases with kernels this codegen does not print yet (each reported as a fallback event): name → count.
EXPECTED_FALLBACKS: dict[str, int] = {}


class TestTritonConformance(CodegenConformance):
    codegen = TritonCodegen()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
class TestTritonConformanceOnCuda(CodegenConformance):
    codegen = TritonCodegen()
    device = "cuda"


def test_every_fallback_over_the_battery_is_reported_and_counted():
    codegen, seen = TritonCodegen(), {}
    for name in battery_names():
        case = battery_case(name)
        with record_events() as rec:
            codegen.compile(case.graph, case.inputs, {})(case.inputs)
        fallbacks = rec.kinds("fallback")
        assert all(e.stage == "codegen-triton" and e.data["reason"] for e in fallbacks)
        if fallbacks:
            seen[name] = len(fallbacks)
    assert seen == EXPECTED_FALLBACKS


def test_every_op_of_the_table_prints_by_a_rule_or_its_default():
    from ember_lowering.codegen import missing_ops

    assert missing_ops(TritonCodegen.prints_op) == []


def test_every_reduction_of_the_table_prints_for_each_dtype_and_shape():
    assert missing_reductions(TritonCodegen().print_kernel) == []
