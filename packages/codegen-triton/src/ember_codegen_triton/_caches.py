"""The Triton codegen's disk caches, declared when its plugin registers (without importing Triton), so that every
process knows them: `ember cache` reports them and a portable artifact loads into them.

- `triton`: a program's module (`<key>.py`, code: it runs) and the manifest of its compiled kernels (`<key>.bins`,
  see `_binaries.py`); what it holds is for this GPU model.
- `triton_tune`: the launch configurations max-autotune chose (`_autotune.py`), timed on this GPU model.
"""

from __future__ import annotations

from ember_core import DiskCache

MODULES = DiskCache("triton", ("py", "bins"), code=("py",), machine=("gpu",))
TUNING = DiskCache("triton_tune", ("choice",), machine=("gpu",))
