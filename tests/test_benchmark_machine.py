"""The CPU a benchmark section is headed with (benchmarks/_harness.machine): a claim holds for the machines it was
measured on, so two machines must not share a heading. A VM may name its CPU only "AMD EPYC": Zen 4 and Zen 5
machines of that name wrote their vector-math tables under one heading (2026-12-05, 2x apart in speed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "benchmarks" / "_harness.py"


def harness():
    spec = importlib.util.spec_from_file_location("ember_bench_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpuinfo(vendor: str, name: str, family: int, model: int, flags: str) -> str:
    return (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\nvendor_id\t: {vendor}\n")


def test_a_masked_amd_name_says_its_core_generation():
    machine = harness().machine
    zen5 = machine(cpuinfo("AuthenticAMD", "AMD EPYC", 26, 2, "avx2 avx512f avx512_bf16"))
    zen4 = machine(cpuinfo("AuthenticAMD", "AMD EPYC", 25, 17, "avx2 avx512f avx512_bf16"))
    assert zen5.startswith("AMD EPYC (Zen 5, family 26, model 2), AVX-512 (BF16), ")
    assert zen4.startswith("AMD EPYC (Zen 3/4, family 25, model 17), AVX-512 (BF16), ")


def test_a_model_name_with_its_number_is_kept_and_intel_amx_is_named():
    machine = harness().machine
    text = cpuinfo("GenuineIntel", "Intel(R) Xeon(R) Platinum 8488C", 6, 143,
                   "avx2 avx512f avx512_bf16 avx512_fp16 amx_tile")
    assert machine(text).startswith("Intel(R) Xeon(R) Platinum 8488C, AVX-512 (BF16, FP16) + AMX, ")
    assert machine(cpuinfo("GenuineIntel", "Intel Xeon Processor", 6, 85, "avx2")).startswith(
        "Intel Xeon Processor (family 6, model 85), AVX2, ")
