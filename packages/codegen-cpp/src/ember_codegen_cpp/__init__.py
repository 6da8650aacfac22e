"""ember-codegen-cpp: KernelPlan → C++ (OpenMP + SIMD) built with the system compiler, cached, called via ctypes."""

from ember_lowering.codegen import BuildError, CannotPrint, Program

from ._build import FLAGS, Builder, compiler
from ._cache import cache_dir, cache_root
from ._codegen import CppCodegen
from ._cpp_rules import cpp_rules
from ._kernel_printer import KernelPrinter
from ._malloc import malloc_tuning
from ._prelude import prelude
from ._program import build_program

__version__ = "0.1.1"

__all__ = [
    "FLAGS", "BuildError", "Builder", "CannotPrint", "CppCodegen", "KernelPrinter", "Program", "__version__",
    "build_program", "cache_dir", "cache_root", "compiler", "cpp_rules", "malloc_tuning", "prelude",
]
