"""ember-codegen-triton: KernelPlan → `@triton.jit` kernels and a generated launch wrapper, on the shared codegen
layer of ember-lowering."""

from ._codegen import TritonCodegen, interpreting
from ._kernel_printer import TritonKernel, TritonKernelPrinter

__version__ = "0.1.0"

__all__ = ["TritonCodegen", "TritonKernel", "TritonKernelPrinter", "__version__", "interpreting"]
