"""ember-codegen-triton's plugin: codegen `triton`, the default for CUDA (priority 50: the only codegen there above
the interpreter); for CPU only when asked for by name (`options={"codegen.cpu": "triton"}`, with
`TRITON_INTERPRET=1`), since codegen `cpp` has priority 100."""

from __future__ import annotations

from ember_core import hookimpl

from ._codegen import TritonCodegen


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "triton", TritonCodegen(), priority=50, devices=("cuda", "cpu"))
    registry.add_option("triton.debug", bool, False,
                        "Triton kernels with device asserts compiled in: an index out of range stops the kernel "
                        "(as TRITON_DEBUG=1)")
    registry.add_option("triton.sync_index_checks", bool, False,
                        "on CUDA, an index out of range in a gather raises torch's own IndexError (the wrapper waits "
                        "for each gather kernel to read its error flag) instead of a device-side assert")
