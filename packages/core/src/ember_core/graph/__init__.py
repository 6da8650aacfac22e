"""The graph IR: the schema's dataclasses (`Graph`, `Node`, `Value`...), ATen op names, dtypes, integer size
expressions, the JSON and text forms (each printed, parsed back and verified; untrusted files parsed, never run), the
fx bridge, custom autograd functions as call nodes, and graph fingerprints.

Imports nothing of ember-core's other parts: every other part reads graphs, none is read by them.
"""

from ._arg_types import arguments_problem
from ._checkpoint import (
    CHECKPOINT_META,
    checkpoint_meta,
    checkpoint_region,
    marked_for_recompute,
    marked_for_saving,
)
from ._custom_function import CUSTOM_FUNCTION, custom_function_arguments, is_custom_function, subgraph_scope
from ._dtypes import LAYOUTS, MEMORY_FORMATS, SHORT_DTYPE_NAMES, dtype_name, to_dtype, unsupported_tensor
from ._expr import ExprError, as_sympy, parse_expr, parse_integer
from ._fingerprint import canonical, fingerprint
from ._fx_bridge import from_fx, to_fx, value_of
from ._identifiers import is_source_identifier, source_identifier
from ._int_expr import IntExpr
from ._json import dumps, graph_from_json, graph_to_json, json_schema, json_schema_path, load, loads, save
from ._op_set import STATISTICS_BACKWARDS, capture_decompositions, decompositions, is_random, symbolic_backward_formulas
from ._ops import is_view_op, may_write, resolve_op, returns_new_storage
from ._parser import load_text, parse_graph, text_constants
from ._printer import format_graph, format_node
from ._schema import (
    INT64_MIN,
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
    copy_to_layout,
    fresh_name,
    graph_device,
    iter_refs,
    map_args,
    memory_format_of,
    node_refs,
    prune_values,
    rename_reads,
    returned_views,
)
from ._sizes import contiguous_stride, is_static, layout_problem
from ._symbol_names import canonical_symbols, rename_symbols, specialize_symbols, sym_inputs
from ._symbolic import evaluate as dim_value
from ._verify import verify

__all__ = [
    "unsupported_tensor", "arguments_problem", "as_sympy", "canonical", "canonical_symbols", "Constant",
    "CUSTOM_FUNCTION", "custom_function_arguments", "capture_decompositions", "STATISTICS_BACKWARDS",
    "decompositions", "dim_value", "dtype_name", "dumps",
    "ExprError", "fingerprint", "contiguous_stride", "format_graph", "format_node", "copy_to_layout", "fresh_name",
    "returned_views",
    "from_fx", "Graph", "graph_device", "graph_from_json", "graph_to_json", "Input", "IntExpr", "is_static",
    "is_custom_function", "is_random", "is_source_identifier", "iter_refs", "json_schema", "json_schema_path",
    "layout_problem", "LAYOUTS", "load", "load_text", "loads", "map_args", "memory_format_of", "MEMORY_FORMATS",
    "Node", "node_refs", "Output", "parse_expr", "parse_graph", "parse_integer", "prune_values", "Ref",
    "rename_reads", "rename_symbols", "resolve_op", "returns_new_storage", "is_view_op", "may_write",
    "save", "SCHEMA_VERSION", "SHORT_DTYPE_NAMES", "source_identifier", "subgraph_scope", "Sym", "Symbol",
    "text_constants", "to_dtype",
    "to_fx", "Value", "value_of", "verify",
    "specialize_symbols", "sym_inputs", "INT64_MIN", "symbolic_backward_formulas",
    "CHECKPOINT_META", "checkpoint_meta", "checkpoint_region", "marked_for_recompute", "marked_for_saving",
]
