"""Each stage package's README shows it used alone ("## Used alone"), and the example runs: the first Python block
of that section, in a fresh process with a fresh cache. A tool author copies these first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "capture", "autograd", "partition", "lowering", "codegen-cpp", "codegen-triton", "runtime")


def example(package: str) -> str:
    text = (ROOT / "packages" / package / "README.md").read_text()
    section = text.split("\n## Used alone\n", 1)
    assert len(section) == 2, f"packages/{package}/README.md has no '## Used alone' section"
    block = re.search(r"```python\n(.*?)\n```", section[1], re.S)
    assert block, f"packages/{package}/README.md: no Python block under '## Used alone'"
    return block[1]


@pytest.mark.parametrize("package", PACKAGES)
def test_the_readme_example_runs(package, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the example decides
    result = subprocess.run([sys.executable, "-c", example(package)], capture_output=True, text=True, timeout=600,
                            cwd=tmp_path, env={**env, "EMBER_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), "the example prints what it made"
