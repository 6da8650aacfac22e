"""ember-codegen-triton: KernelPlan → `@triton.jit` kernels and a generated launch wrapper, on the shared codegen
layer of ember-lowering.

Triton is imported on first use of `TritonCodegen` or `interpreting`, not with the package: under
`TRITON_INTERPRET=1` importing Triton imports numpy (its interpreter's), which only the interpreter needs
(`pip install 'ember-codegen-triton[interpreter]'`)."""

from typing import Any

from ._kernel_printer import TritonKernel, TritonKernelPrinter

__version__ = "0.1.0"

__all__ = ["TritonCodegen", "TritonKernel", "TritonKernelPrinter", "__version__", "interpreting"]


def __getattr__(name: str) -> Any:
    if name in ("TritonCodegen", "interpreting"):
        from . import _codegen

        return getattr(_codegen, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
