"""The prelude: no headers, libm declared (vectorized where libmvec has every ISA), and it compiles alone."""

from __future__ import annotations

import subprocess

import pytest
from ember_codegen_cpp import FLAGS, compiler, prelude
from ember_codegen_cpp._prelude import vector_libm


def test_prelude_includes_no_headers_and_declares_libm():
    text = prelude()
    assert "#include" not in text
    assert "float expf(float);" in text and "double erf(double);" in text


def test_vectorized_functions_are_declared_simd():
    text = prelude()
    for name in vector_libm():
        ctype = "float" if name.endswith("f") and name[:-1] in ("exp", "tanh", "erf", "log", "sin") else None
        if ctype:
            assert f"#pragma omp declare simd notinbranch\n{ctype} {name}(" in text


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_prelude_compiles_alone(tmp_path):
    src = tmp_path / "p.cpp"
    src.write_text(prelude() + 'extern "C" float f(float x) { return ember_round_bf16(expf(x)); }\n')
    proc = subprocess.run([compiler(), *FLAGS, str(src), "-o", str(tmp_path / "p.so")], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
