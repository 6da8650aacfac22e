"""ember-codegen-cpp's plugin, found by entry point like any other: codegen `cpp`, the default for CPU."""

from __future__ import annotations

from ember_core import hookimpl

from ._codegen import CppCodegen
from ._gemm import CHOICES, OPTION
from ._malloc import CHOICES as MALLOC_CHOICES
from ._malloc import OPTION as MALLOC_OPTION


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "cpp", CppCodegen(), priority=100, devices=("cpu",))
    registry.add_option(OPTION, str, "measure",
                        "float32 mm/addmm calls on oneDNN's matmul instead of ATen's: 'measure' (where timing both on "
                        "this CPU, once per shape and layout, finds oneDNN faster; kept on disk), 'onednn' (wherever "
                        "it applies), 'aten' (never)", choices=CHOICES)
    registry.add_option(MALLOC_OPTION, str, "thresholds",
                        "glibc's malloc thresholds, set once per process when the first CPU graph is compiled: "
                        "'thresholds' (mmap 32 MiB, trim 64 MiB, where glibc's own rule for them ends: buffers up to "
                        "32 MiB stay mapped between calls instead of faulting in again; unless a MALLOC_*_ variable, "
                        "a glibc.malloc tunable or a preloaded allocator chose already), 'system' (left alone)",
                        choices=MALLOC_CHOICES)
