"""The layer every codegen of the loop IR shares: program steps, buffer layout, the generated Python wrapper,
layout checks and ATen/interpreter fallbacks with their events, lazy binding of builds, the build pool over
ember-core's verified disk cache, the measuring of kernel variants under max-autotune (`Tuner`), and what each
step costs for profilers (`program_costs`, the wrapper's profiled twin). A codegen
subclasses `PlanCodegen` and says only what is its own: how a kernel prints, how its unit builds and how the
wrapper calls a segment (see ember-codegen-cpp)."""

from ._build_pool import Build, BuildPool, report_build
from ._codegen import PlanCodegen
from ._dedup import same_kernels, with_placeholders
from ._errors import BindError, BuildError, CannotPrint, ExternDtypeError
from ._exprs import IndexPrinter, unwrapped
from ._fallback import (
    InterpreterFallback,
    UseFallback,
    fix_layout,
    non_overlapping,
    relayout,
    report_fallback,
    same_layout,
)
from ._kernel_walk import KernelWalk
from ._layout import PlanLayout
from ._lazy import LazyBinding
from ._op_conformance import (
    REDUCTION_SHAPES,
    missing_ops,
    missing_reductions,
    one_op_kernel,
    one_reduction_plan,
    prints_by_trying,
)
from ._profiling import flop_rules, program_costs
from ._program import (
    InterpretedKernel,
    PrintedKernel,
    Program,
    Segment,
    Step,
    interpreted_kernel,
    kernel_name,
    plan_program,
)
from ._tuning import TUNED_MODES, Choice, Tuner, tuning_mode
from ._wrapper import WrapperWriter

__all__ = [
    "TUNED_MODES", "BindError", "Build", "BuildError", "BuildPool", "CannotPrint", "Choice", "ExternDtypeError",
    "IndexPrinter", "InterpretedKernel", "InterpreterFallback", "KernelWalk", "LazyBinding", "PlanCodegen",
    "PlanLayout", "PrintedKernel", "Program", "Segment", "Step",
    "Tuner", "UseFallback", "WrapperWriter", "fix_layout", "interpreted_kernel", "non_overlapping",
    "plan_program", "relayout", "report_build", "report_fallback", "same_layout", "tuning_mode", "unwrapped",
    # kernels of one body printed once (`_dedup.py`)
    "same_kernels", "with_placeholders",
    # the op tables: what a codegen prints of them (its conformance tests assert `missing_ops(prints_op) == []` and
    # `missing_reductions(print_kernel) == []`)
    "REDUCTION_SHAPES", "missing_ops", "missing_reductions", "one_op_kernel", "one_reduction_plan", "prints_by_trying",
    # profiling: each step's bytes and FLOPs (the wrapper's profiled twin names its ranges the same)
    "flop_rules", "kernel_name", "program_costs",
]
