"""ember-lowering: ATen graphs → a backend-neutral loop IR (KernelPlan), fused and with buffers planned."""

from ._capabilities import Capabilities, select_passes
from ._decisions import VERDICTS, Decision
from ._errors import LoweringError, PlanError, Unsupported
from ._indexing import Ranges, flat_index, simplify, storage_size, sym, to_expr
from ._interpreter import PlanInterpreter, interpreter_rules, run_plan, size_of
from ._loop_ir import (
    ITEMSIZE,
    KERNEL_DTYPES,
    NAN,
    REDUCTIONS,
    TRANSCENDENTAL,
    Buffer,
    Dim,
    Extern,
    Instr,
    Item,
    Kernel,
    KernelPlan,
    Loop,
    Op,
    opmath,
)
from ._loop_ir import POINTWISE as POINTWISE_OPS
from ._lowering import bind_args, lower, lower_graph, lowering_rules
from ._op_semantics import SEMANTICS, OpSemantics, define_op, forget_op, kind_of
from ._parser import parse_plan
from ._plan_cache import PLANS, lower_cached, plan_facts, read_plan
from ._printer import format_instr, format_plan
from ._reduction_semantics import (
    NAN_ARITHMETIC,
    NAN_EXTREME,
    NAN_IS_TRUE,
    NAN_PROPAGATES,
    REDUCTION_SEMANTICS,
    ReductionSemantics,
)
from ._rules_pointwise import elementwise
from ._scalars import sym_rules
from ._scheduler import Pass, bind_passes, buffers_read, buffers_written, default_passes, schedule
from ._split_reductions import SplitPolicy
from ._verify import check_round_trip, verify_plan
from .loop_passes.decompose_ops import Prints, decompose_ops
from .loop_passes.stash_values import recompute_locals

__version__ = "0.1.0"

__all__ = [
    # what the shared codegen layer (ember_lowering.codegen) reads of the loop IR beside the above
    "ITEMSIZE", "Prints", "buffers_read", "buffers_written", "size_of", "sym", "to_expr",
    "KERNEL_DTYPES", "NAN", "PLANS", "POINTWISE_OPS", "REDUCTIONS", "SEMANTICS", "TRANSCENDENTAL", "VERDICTS",
    "Buffer", "Capabilities", "Decision", "Dim", "Extern", "Instr", "Item", "Kernel", "KernelPlan", "Loop",
    "LoweringError", "Op", "OpSemantics", "Pass", "PlanError", "PlanInterpreter", "Ranges", "SplitPolicy",
    "Unsupported",
    # the reduction table: each reduction's identity, combine op, NaN rule, state and reference
    "NAN_ARITHMETIC", "NAN_EXTREME", "NAN_IS_TRUE", "NAN_PROPAGATES", "REDUCTION_SEMANTICS", "ReductionSemantics",
    "__version__", "bind_args", "bind_passes", "check_round_trip", "decompose_ops", "default_passes", "define_op",
    "elementwise",
    "flat_index", "forget_op", "format_instr", "format_plan", "interpreter_rules", "kind_of", "lower", "lower_cached",
    "lower_graph", "lowering_rules", "opmath", "parse_plan", "plan_facts", "read_plan", "recompute_locals",
    "run_plan", "schedule", "select_passes", "simplify", "storage_size", "sym_rules", "verify_plan",
]
