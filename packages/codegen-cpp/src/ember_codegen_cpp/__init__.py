"""ember-codegen-cpp: KernelPlan → C++ (OpenMP + SIMD) built with the system compiler, cached, called via ctypes."""

from ._build import FLAGS, Builder, compiler
from ._cache import cache_dir, cache_root
from ._codegen import CppCodegen
from ._cpp_rules import cpp_rules
from ._errors import BuildError, CannotPrint
from ._kernel_printer import KernelPrinter
from ._prelude import prelude
from ._program import Program, build_program

__version__ = "0.1.1"

__all__ = [
    "FLAGS", "BuildError", "Builder", "CannotPrint", "CppCodegen", "KernelPrinter", "Program", "__version__",
    "build_program", "cache_dir", "cache_root", "compiler", "cpp_rules", "prelude",
]
