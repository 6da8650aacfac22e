"""Running and tracing graphs under torch: the reference interpreter and the Python code it compiles to, CUDA graphs,
autocast applied once, gradient rules ATen lacks, the process-wide tracing lock, functionalization that keeps
effectful ops, and the profiling ranges and kernel costs of compiled code.

Builds on the graph IR, the events and the plugin manager.
"""

from ._autocast import autocast_disabled, autocast_on, autocast_state, without_autocast
from ._cuda_graphs import CudaBackend, CudaGraphed, cuda_graphed
from ._effects import EffectfulFunctionalMode, has_effect, is_impure_node
from ._grad_rules import grad_rules
from ._interpreter import RESHAPE, STRICT_VIEWS, Interpreter, interpret, node_callable, run_on_fakes
from ._profiling import GraphCosts, KernelCost, costs_of, profile_range, profiler_active, register_costs
from ._pycode import direct_call, keyword_name, load_function, returns_sequence
from ._tracing import eager_derivatives, tracing_lock, without_saved_tensor_hooks

__all__ = [
    "autocast_disabled", "autocast_on", "autocast_state", "costs_of", "cuda_graphed", "CudaBackend", "CudaGraphed",
    "direct_call", "EffectfulFunctionalMode", "grad_rules", "GraphCosts", "has_effect", "interpret", "Interpreter",
    "is_impure_node", "KernelCost", "keyword_name", "load_function", "node_callable", "profile_range",
    "profiler_active", "RESHAPE", "run_on_fakes", "STRICT_VIEWS",
    "eager_derivatives", "register_costs", "returns_sequence", "tracing_lock", "without_autocast",
    "without_saved_tensor_hooks",
]
