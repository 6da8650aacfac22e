"""numpy is needed only by Triton's interpreter. In an environment without numpy, with `TRITON_INTERPRET=1` set,
ember still compiles on the C++ codegen and `ember plugins` lists every stage; asking for the Triton codegen on the
CPU there names the missing package and how to install it (ember-codegen-triton's `interpreter` extra)."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import site, sys
    site.addsitedir(sys.argv.pop(1))
    import warnings
    warnings.simplefilter("ignore")  # torch warns that it found no numpy
    import torch, ember
    fn = lambda x: torch.sin(x) * 2 + 1
    x = torch.randn(8, 8)
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))
    print("compiled; triton imported:", "triton" in sys.modules, "numpy imported:", "numpy" in sys.modules)
    from ember._cli import main
    assert main(["plugins"]) == 0
    try:
        ember.compile(fn, options={"codegen.cpu": "triton"})(x)
    except Exception as e:
        print("triton on cpu:", e)
""")


def site_without_numpy(dest: Path) -> Path:
    """A site directory holding links to everything this environment has installed except numpy: a process started
    with `-S` that adds it (`site.addsitedir`, which also runs its .pth files) sees the environment minus numpy."""
    dest.mkdir()
    for folder in map(Path, site.getsitepackages()):
        for entry in folder.iterdir():
            if not entry.name.lower().startswith("numpy") and not (dest / entry.name).exists():
                (dest / entry.name).symlink_to(entry)
    return dest


def test_ember_and_ember_plugins_work_without_numpy_under_triton_interpret(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "EMBER_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("EMBER_OPTIONS", None)
    done = subprocess.run([sys.executable, "-S", "-c", SCRIPT, str(site_without_numpy(tmp_path / "site"))],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiled; triton imported: False numpy imported: False" in done.stdout
    assert "codegen    triton " in done.stdout and "codegen    cpp " in done.stdout
    assert "needs numpy: pip install 'ember-codegen-triton[interpreter]'" in done.stdout, done.stdout
