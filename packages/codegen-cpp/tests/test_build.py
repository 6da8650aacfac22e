"""Builds: keys change with source, flags and compiler; errors carry the compiler's output."""

from __future__ import annotations

import re
import subprocess

import pytest
from ember_codegen_cpp import Builder, BuildError, compiler
from ember_codegen_cpp._build import FLAGS, PART_LINES, build_key, run_compiler, vector_lanes
from ember_codegen_cpp._prelude import prelude


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_key_depends_on_source_flags_and_compiler():
    cxx = compiler()
    base = build_key("int x;", FLAGS, cxx)
    assert base == build_key("int x;", FLAGS, cxx)
    assert base != build_key("int y;", FLAGS, cxx)
    assert base != build_key("int x;", FLAGS + ("-O1",), cxx)


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_compiler_error_is_reported_with_its_output(tmp_path):
    with pytest.raises(BuildError, match="this_is_not_cpp"):
        run_compiler(compiler(), FLAGS, "this_is_not_cpp;", tmp_path)
    assert not (tmp_path / "ember.so").exists()


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_same_source_requested_twice_builds_once():
    builder = Builder()
    src = 'extern "C" int ember_build_twice(void) { return 7; }\n'
    first, second = builder.library(src), builder.library(src)
    assert first.future.result() == second.future.result()
    assert builder.library(src).hit


def test_a_unit_splits_only_in_parts_of_part_lines_and_at_most_one_per_worker():
    builder = Builder(part_lines=1000, workers=4)
    assert [builder.parts(n) for n in (0, 999, 1999, 2000, 3500, 100_000)] == [1, 1, 1, 2, 3, 4]
    assert Builder().parts(PART_LINES - 1) == 1


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
@pytest.mark.parametrize("rows", [(6, 8), (2, 4)], ids=["last-rows", "middle-rows"])
def test_a_masked_load_rounded_to_bfloat16_is_built_right(rows):
    """gcc 12.2 -O3 miscompiled this kernel's scalar loop (the if-converted masked load of the scattered rows,
    rounded twice through bfloat16): those rows came out 0, silently. Built with `GCC_FLAGS` they are right; the
    linear_cross_entropy `chunked_none` OpInfo's bfloat16 gradient lost its last chunk's rows this way."""
    import torch
    from helpers import check

    x, y = torch.arange(24.0).reshape(8, 3), torch.full((2, 3), 100.0)
    check(lambda x, y: torch.slice_scatter(x, y, 0, *rows).bfloat16(), x, y)


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_gcc_builds_without_loop_if_conversion():
    from ember_codegen_cpp._build import GCC_FLAGS, is_gcc

    builder = Builder()
    assert set(GCC_FLAGS) <= set(builder.flags) if is_gcc(builder.cxx) else not set(GCC_FLAGS) & set(builder.flags)


@pytest.mark.skipif(compiler() is None or vector_lanes()[0] < 8, reason="needs a C++ compiler and AVX2 or AVX-512")
@pytest.mark.parametrize("lanes", vector_lanes())
def test_the_vector_layers_lane_loops_are_whole_vector_instructions_under_a_narrower_tuning(lanes):
    """The vector layer's fma and rint are loops over the lanes that the compiler must turn into one instruction of
    the vectors' width each. Under a tuning that prefers narrower vectors (gcc's Intel ones 256 bits, which
    -march=native picks on a Xeon; znver1's 128) gcc did each fma of ember's 16-lane exp lane by lane inside a kernel
    and each rint in halves, 6x slower; the builder's flags prefer the CPU's native width (`machine_flags`)."""
    register = {16: "zmm", 8: "ymm"}[lanes]
    source = prelude() + (f'\nextern "C" ember_f32x{lanes} ember_test_exp(ember_f32x{lanes} x) {{\n'
                          f"  return ember_vexpf(x);\n}}\n")
    for tune in ("znver1", "icelake-server"):
        flags = [f for f in Builder().flags if f != "-shared"] + [f"-mtune={tune}", "-S", "-o", "-"]
        asm = subprocess.run([compiler(), *flags, "-x", "c++", "-"], input=source, capture_output=True, text=True,
                             check=True).stdout
        code = asm.split("ember_test_exp:", 1)[1].split(".cfi_endproc", 1)[0]
        assert not re.search(r"vfmadd\d+ss", code), f"{tune}: an fma lane by lane\n{code}"
        fmas = re.findall(r"vfmadd\d+ps\s[^\n]*%(\w+)", code)
        rints = re.findall(r"(?:vrndscaleps|vroundps)\s[^\n]*%(\w+)", code)
        assert fmas and rints, code
        assert {r[:3] for r in fmas + rints} == {register}, f"{tune}: fma or rint in halves\n{code}"
