"""ember-codegen-triton's plugin: codegen `triton`, the default for CUDA (priority 50: the only codegen there above
the interpreter); for CPU only when asked for by name (`options={"codegen.cpu": "triton"}`, with
`TRITON_INTERPRET=1`), since codegen `cpp` has priority 100. And the graph pass `pad-gemms` (after capture; CUDA
graphs only: `graph_passes/`).

Registering imports neither Triton nor numpy: the codegen is built on its first use (`LazyTritonCodegen`), so that
ember, the C++ codegen and `ember plugins` work where numpy is missing, even with `TRITON_INTERPRET=1` set."""

from __future__ import annotations

import threading
from typing import Any

from ember_core import hookimpl

from . import _caches  # noqa: F401 - declares the codegen's disk caches (no Triton import)
from ._capabilities import TRITON_CAPABILITIES
from .graph_passes import PadGemms


class LazyTritonCodegen:
    """Stands in for `TritonCodegen` in the registry and builds it on first attribute use. Under
    `TRITON_INTERPRET=1` Triton imports numpy as it loads; a missing numpy is then named with its fix."""

    name = "triton"
    capabilities = TRITON_CAPABILITIES

    def __init__(self) -> None:
        self._codegen: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._codegen is None:
                try:
                    from ._codegen import TritonCodegen
                except ModuleNotFoundError as e:
                    if e.name != "numpy":
                        raise
                    raise ModuleNotFoundError(
                        "codegen 'triton' under TRITON_INTERPRET=1 runs Triton's interpreter, which needs numpy: "
                        "pip install 'ember-codegen-triton[interpreter]' (or numpy)", name="numpy") from e
                self._codegen = TritonCodegen()
            return self._codegen

    def __getattr__(self, attr: str) -> Any:  # only for what the class does not define: the codegen's own
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._load(), attr)


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "triton", LazyTritonCodegen(), priority=50, devices=("cuda", "cpu"))
    # CUDA graphs only (graph_passes/): aligned GEMMs (NHWC convolutions: ember-lowering's `channels-last`)
    registry.add("pass", PadGemms.id, PadGemms(), point="post_capture", devices=("cuda",))
    registry.add_option("triton.debug", bool, False,
                        "Triton kernels with device asserts compiled in: an index out of range stops the kernel "
                        "(as TRITON_DEBUG=1)")
    registry.add_option("triton.launch", str, "lean",
                        "how kernels launch on CUDA: 'lean' (a launcher made once per kernel calls its binary when the "
                        "call fits what it was compiled for, else Triton's path) or 'jit' (Triton's kernel[grid](...) "
                        "every time)", choices=("lean", "jit"))
    registry.add_option("triton.gemm_templates", str, "measure",
                        "under a max-autotune mode, an extern mm/addmm/bmm and the pointwise kernel after it may run "
                        "as one Triton matmul template: 'measure' (kept where the first call measures it faster than "
                        "the extern call plus the kernel), 'always' (taken wherever it applies), 'never'",
                        choices=("measure", "always", "never"))
    registry.add_option("triton.sync_index_checks", bool, False,
                        "on CUDA, an index out of range in a gather raises torch's own IndexError (the wrapper waits "
                        "for each gather kernel to read its error flag) instead of a device-side assert")
