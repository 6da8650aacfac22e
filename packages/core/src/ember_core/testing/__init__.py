"""Test helpers for ember and its plugins: the graph battery, reference joint graphs and partition, the conformance
kits (codegen, frontend, autograd, partitioner), a graph with a custom autograd function call, golden snapshots,
random inputs, training gradients' errors against float64 (`gradient_errors`), the bytes a training step keeps for
its backward (`kept_for_backward`) and a call's peak of allocated memory (`peak_allocated`), fuzzing helpers and
`restamp` (a disk-cache entry changed consistently). The pytest plugin (`gpu` marker) is
`ember_core.testing.pytest_plugin`, loaded by entry point.

Names load on first use, so the pytest plugin's import stays cheap."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BatteryCase": "._battery", "battery": "._battery", "battery_case": "._battery", "battery_names": "._battery",
    "clone_inputs": "._battery", "TRACE_SIZE": "._battery", "OTHER_SIZE": "._battery",
    "CaseSpec": "._battery", "battery_spec": "._battery", "trace_case": "._battery",
    "JointCase": "._joint", "RegionPartitioner": "._joint", "joint_case": "._joint", "run_joint": "._joint",
    "run_partition": "._joint", "trace_joint": "._joint", "with_grad": "._joint",
    "CodegenConformance": "._conformance", "TrainingCase": "._conformance", "training_case": "._conformance",
    "training_names": "._conformance",
    "FallbackRecorder": "._fallbacks", "count_fallbacks": "._fallbacks", "describe_fallbacks": "._fallbacks",
    "fallback_cause": "._fallbacks",
    "AutogradConformance": "._autograd_kit", "assert_joint_layout": "._autograd_kit", "autograd_case": "._autograd_kit",
    "FrontendConformance": "._frontend_kit", "GraphRecorder": "._frontend_kit",
    "PartitionerConformance": "._partition_kit", "assert_partition_layout": "._partition_kit",
    "assert_same_results": "._partition_kit", "partition_case": "._partition_kit",
    "DeviceAudit": "._devices", "graph_to_device": "._devices", "inputs_to_device": "._devices",
    "cuda_context_lost": "._devices",
    "assert_golden": "._golden", "accepting": "._golden",
    "random_inputs": "._inputs", "trace_aten": "._aten_trace",
    "Gate": "._custom_function", "gate_graph": "._custom_function",
    "in_threads": "._threads",
    "GradError": "._grad_accuracy", "errors_against": "._grad_accuracy", "gradient_errors": "._grad_accuracy",
    "too_far": "._grad_accuracy", "training_gradients": "._grad_accuracy", "NOISE_ULPS": "._grad_accuracy",
    "restamp": "._cache_entries", "kept_for_backward": "._memory", "peak_allocated": "._memory",
    "PAYLOADS": "._fuzz", "assert_no_code_ran": "._fuzz", "fuzz_examples": "._fuzz", "fuzz_settings": "._fuzz",
    "FuzzTally": "._fuzz", "FuzzFailure": "._fuzz", "accepted_graph_problem": "._fuzz",
    "accepted_call_problem": "._fuzz", "constant_fit_problem": "._fuzz", "marker_payloads": "._fuzz",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ember_core.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return __all__
