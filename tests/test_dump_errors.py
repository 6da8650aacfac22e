"""A dump folder that cannot be written is a warning, never a failed compile (seen as a user sees it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import ember, torch
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    out = ember.compile(model, options={"frontend": "trace"})(x)
    out.sum().backward()
    torch.testing.assert_close(out, model(x))
    print("compiled")
""")


def test_dump_path_that_is_a_file_warns_once_and_the_compile_succeeds(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("a file, not a folder")
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "EMBER_DUMP": str(taken), "EMBER_CACHE_DIR": str(tmp_path / "c")})
    assert result.returncode == 0, result.stderr
    assert "compiled" in result.stdout
    lines = [line for line in result.stderr.splitlines() if "cannot write dumps" in line]
    assert len(lines) == 1 and str(taken) in lines[0]
