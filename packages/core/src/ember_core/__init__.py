"""ember-core: the graph-interchange schema, its JSON and fx forms, the reference interpreter, hooks and events."""

from ._arg_types import arguments_problem
from ._autocast import autocast_disabled, autocast_on, autocast_state, without_autocast
from ._builtin import InterpreterCodegen, interpreter_codegen
from ._cache_dir import cache_root, private_cache_dir
from ._cache_usage import CacheUsage, cache_size_limit, clear_disk_cache, disk_cache_usage
from ._code_version import code_version
from ._cuda_graphs import CudaBackend, CudaGraphed, cuda_graphed
from ._custom_function import (
    CUSTOM_FUNCTION,
    custom_function_arguments,
    is_custom_function,
    subgraph_scope,
)
from ._disk_cache import CacheLookup, DiskCache, EntryFile
from ._dtypes import LAYOUTS, MEMORY_FORMATS, SHORT_DTYPE_NAMES, dtype_name, to_dtype
from ._dump import DumpWriter
from ._effects import EffectfulFunctionalMode, has_effect
from ._errors import EmberError, GraphError, OptionError, PluginError, SchemaError
from ._events import (
    EVENT_KINDS,
    FALLBACK_CAUSES,
    Event,
    EventKind,
    GraphCompiled,
    JointTraced,
    Partitioned,
    Stopwatch,
)
from ._expr import ExprError, IntExpr, as_sympy, parse_expr, parse_integer
from ._fallback_warning import WARNED_CAUSES, FallbackWarning, warn_fallback
from ._fingerprint import canonical, fingerprint
from ._fx_bridge import from_fx, to_fx, value_of
from ._grad_rules import grad_rules
from ._graph_passes import run_graph_passes
from ._identifiers import is_source_identifier, source_identifier
from ._interpreter import Interpreter, interpret, node_callable
from ._json import dumps, graph_from_json, graph_to_json, json_schema, json_schema_path, load, loads, save
from ._op_set import decompositions, is_random
from ._ops import resolve_op, returns_new_storage
from ._options import OptionSpec
from ._parser import load_text, parse_graph, text_constants
from ._plugins import Implementation, PluginManager, PluginRegistry, emit, get_plugin_manager, reset_plugin_manager
from ._printer import format_graph, format_node
from ._profiling import GraphCosts, KernelCost, costs_of, profile_range, profiler_active, register_costs
from ._pycode import direct_call, keyword_name, load_function, returns_sequence
from ._recording import record_events
from ._regular_file import FileRefused, read_at_most, read_regular_file, regular_file
from ._result_cache import ResultCache, clear_result_caches, facts_key
from ._schema import (
    SCHEMA_VERSION,
    Constant,
    Graph,
    Input,
    Node,
    Output,
    Ref,
    Sym,
    Symbol,
    Value,
    fresh_name,
    graph_device,
    iter_refs,
    map_args,
    node_refs,
    prune_values,
    rename_reads,
)
from ._sizes import layout_problem
from ._stages import (
    PASS_POINTS,
    Autograd,
    BackendFrontend,
    Codegen,
    CompiledGraph,
    Frontend,
    GraphPass,
    JointGraph,
    Partition,
    Partitioner,
)
from ._symbol_names import canonical_symbols, rename_symbols
from ._symbolic import evaluate as dim_value
from ._tracing import tracing_lock
from ._verify import verify
from .hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "CudaBackend", "CudaGraphed", "cuda_graphed",
    # autocast applied once, at capture
    "autocast_disabled", "autocast_on", "autocast_state", "without_autocast",
    "grad_rules",
    "BackendFrontend", "CacheLookup", "CacheUsage", "CompiledGraph", "Constant", "DiskCache", "EmberError", "EntryFile",
    "Event",
    "ExprError", "Frontend", "Graph", "GraphError", "Implementation", "Input", "IntExpr", "Interpreter", "JointGraph",
    "Node", "OptionError", "OptionSpec", "Output", "Partition", "PluginError", "PluginManager", "PluginRegistry", "Ref",
    "SCHEMA_VERSION", "SHORT_DTYPE_NAMES", "SchemaError", "Sym", "Symbol", "Value", "__version__", "as_sympy",
    "cache_root", "cache_size_limit", "canonical", "canonical_symbols", "clear_disk_cache", "decompositions",
    "dim_value", "direct_call", "disk_cache_usage", "dtype_name", "dumps", "emit", "fingerprint", "format_graph",
    "format_node", "fresh_name", "from_fx", "get_plugin_manager", "graph_device", "graph_from_json",
    "graph_to_json", "has_effect",
    "hookimpl", "interpret", "is_random", "iter_refs", "json_schema", "json_schema_path", "keyword_name", "load",
    "load_function", "load_text", "loads", "map_args", "node_refs", "parse_expr", "parse_graph", "private_cache_dir",
    "is_source_identifier", "source_identifier",
    "prune_values", "record_events", "rename_reads", "rename_symbols", "reset_plugin_manager", "resolve_op",
    "returns_new_storage", "returns_sequence", "save", "to_dtype", "to_fx", "tracing_lock", "value_of", "verify",
    # functionalization that keeps effectful ops as nodes (see has_effect)
    "EffectfulFunctionalMode",
    # stage contracts: event payloads, the dump writer, the interpreter codegen
    "EVENT_KINDS", "Autograd", "Codegen", "DumpWriter", "EventKind", "GraphCompiled", "GraphPass", "InterpreterCodegen",
    # graph passes: the points of the pipeline where they run, and the one runner
    "PASS_POINTS", "run_graph_passes",
    "JointTraced", "Partitioned", "Partitioner", "interpreter_codegen", "FALLBACK_CAUSES", "Stopwatch",
    # custom autograd functions: the call node and its subgraphs
    "CUSTOM_FUNCTION", "custom_function_arguments", "is_custom_function", "node_callable", "subgraph_scope",
    "text_constants",
    # disk caches of stage results (a warm start in a later process)
    "ResultCache", "clear_result_caches", "code_version", "facts_key",
    # the fallbacks a user is warned about
    "FallbackWarning", "WARNED_CAUSES", "warn_fallback",
    # untrusted input: integer expressions, layouts within int64, call arguments by schema, fixed name tables,
    # regular files only
    "parse_integer", "layout_problem", "arguments_problem", "LAYOUTS", "MEMORY_FORMATS", "FileRefused",
    "read_at_most", "read_regular_file", "regular_file",
    # profiling: the wrappers' check and ranges, each compiled graph's kernel costs
    "GraphCosts", "KernelCost", "costs_of", "profile_range", "profiler_active", "register_costs",
]
