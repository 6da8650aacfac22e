"""benchmarks/cpu.py runs end to end and checks every compiled variant against eager before it times it (a row
whose result is wrong is marked WRONG and the script exits 1 without writing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_the_cpu_benchmark_compares_each_variant_with_eager_before_timing():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "EMBER_OPTIONS")}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "cpu.py"), "--only", "softmax,mlp train step",
                           "--procs", "1", "--repeats", "1", "--threads", "1"], capture_output=True, text=True,
                          timeout=600, env=env, cwd=BENCHMARKS)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = {line for line in done.stdout.splitlines()  # each printed as measured, then in the table
            if line.startswith("| 1 | softmax") or line.startswith("| 1 | mlp train")}
    assert len(rows) == 2 and not any("WRONG" in r for r in rows), done.stdout
