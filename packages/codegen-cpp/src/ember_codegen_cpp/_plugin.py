"""ember-codegen-cpp's plugin, found by entry point like any other: codegen `cpp`, the default for CPU."""

from __future__ import annotations

from ember_core import hookimpl

from ._codegen import CppCodegen
from ._gemm import CHOICES, OPTION


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "cpp", CppCodegen(), priority=100, devices=("cpu",))
    registry.add_option(OPTION, str, "measure",
                        "float32 mm/addmm calls on oneDNN's matmul instead of ATen's: 'measure' (where timing both on "
                        "this CPU, once per shape and layout, finds oneDNN faster; kept on disk), 'onednn' (wherever "
                        "it applies), 'aten' (never)", choices=CHOICES)
