"""A loop-IR op added in a test, through both codegens and both reference interpreters (tests/_new_op.py): its
meaning and default are given once, no codegen has a rule for it, and nothing falls back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("_new_op.py")


@pytest.mark.parametrize(("codegen", "kernels"), [("cpp", 1), ("triton", 1), ("interpreter", 0)])
def test_an_op_added_outside_ember_runs_everywhere_without_a_rule(codegen, kernels, tmp_path):
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "TRITON_INTERPRET": "1"}
    env.pop("EMBER_OPTIONS", None)
    out = subprocess.run([sys.executable, str(SCRIPT), codegen], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.stdout.strip().splitlines()[-1:] == [f"ok {codegen} kernels={kernels} fallbacks=0"], \
        out.stdout + out.stderr
