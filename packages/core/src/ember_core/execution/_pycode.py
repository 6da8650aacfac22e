"""Straight-line Python for a Graph: one call per node, like the interpreter but with no per-node dispatch.

The reference `Interpreter` stays the oracle; this is what the `interpreter` codegen runs, because its per-call
cost is a plain Python function call. The source is kept for dumps and registered with linecache so tracebacks
show the generated line.
"""

from __future__ import annotations

import itertools
import linecache
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import GraphError
from ..graph._identifiers import is_source_identifier, source_identifier
from ..graph._ops import resolve_op
from ..graph._schema import Graph, Ref, Sym, has_sym, node_refs
from ..graph._symbolic import evaluate
from ._interpreter import Interpreter, node_callable

_counter = itertools.count()


class _Namer:
    """Safe local names for values (`x`, `mm`, or `v3` where a name would not do) and globals for everything else."""

    def __init__(self) -> None:
        self.locals: dict[str, str] = {}
        self.globals: dict[str, Any] = {}

    def local(self, value: str) -> str:
        if value not in self.locals:
            ok = is_source_identifier(value) and not value.startswith("_")
            self.locals[value] = value if ok else f"v{len(self.locals)}"
        return self.locals[value]

    def constant(self, obj: Any) -> str:
        name = f"_k{len(self.globals)}"
        self.globals[name] = obj
        return name

    def arg(self, a: Any) -> str:
        if isinstance(a, Ref):
            return self.locals[a.name]
        if isinstance(a, Sym):
            return f"_evaluate({a.expr!r}, _syms)"
        if isinstance(a, tuple):
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if a is None or isinstance(a, (bool, int, str)) or isinstance(a, float) and math.isfinite(a):
            return repr(a)
        return self.constant(a)


def python_source(graph: Graph, overrides: Mapping[str, Callable] | None = None) -> tuple[str, dict[str, Any]]:
    """The source of `def <name>(inputs): ...` and the globals it needs; `overrides` as for `Interpreter`."""
    overrides = overrides or {}
    namer = _Namer()
    fn_name = f"graph_{source_identifier(graph.name)}"
    lines = [f"def {fn_name}(inputs):"]
    params = [namer.local(i.name) for i in graph.inputs]
    if params:
        lines.append(f"    {', '.join(params)}{',' if len(params) == 1 else ''} = inputs")
    for name, c in graph.constants.items():
        namer.globals[f"_c_{namer.local(name)}"] = c.tensor
        lines.append(f"    {namer.local(name)} = _c_{namer.local(name)}")
    if any(has_sym(n.args) or has_sym(tuple(n.kwargs.values())) for n in graph.nodes):
        namer.globals["_bindings"] = Interpreter(graph).bindings
        lines.append("    _syms = _bindings(inputs)")
    last_use = {r: i for i, n in enumerate(graph.nodes) for r in node_refs(n)}
    keep = {o.name for o in graph.outputs} | set(graph.constants)
    for i, node in enumerate(graph.nodes):
        op = f"_op{i}"
        namer.globals[op] = overrides[node.op] if node.op in overrides else direct_call(node_callable(graph, node))
        args = [namer.arg(a) for a in node.args] + [f"{keyword_name(k)}={namer.arg(v)}" for k, v in node.kwargs.items()]
        outs = [namer.local(o) for o in node.outputs]
        single = len(outs) == 1 and not returns_sequence(resolve_op(node.op))
        lhs = outs[0] if single else ", ".join(outs) + ("," if len(outs) == 1 else "")
        lines.append(f"    {lhs} = {op}({', '.join(args)})  # {node.op}")
        dead = [namer.locals[r] for r in dict.fromkeys(node_refs(node)) if last_use[r] == i and r not in keep]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    return [{', '.join(namer.locals[o.name] for o in graph.outputs)}]")
    return "\n".join(lines) + "\n", {**namer.globals, "_evaluate": evaluate}


def python_function(graph: Graph, overrides: Mapping[str, Callable] | None = None
                    ) -> tuple[Callable[[Sequence[Any]], list], str]:
    """Compile the graph to a Python function `fn(inputs) -> outputs`; returns it with its source."""
    source, env = python_source(graph, overrides)
    return load_function(source, env, source.split("(", 1)[0].removeprefix("def "), f"graph-{graph.name}"), source


def load_function(source: str, env: dict[str, Any], fn_name: str, label: str) -> Callable:
    """Run source that ember generated (never text from a user: names in it are ember's, values reach it through
    `env`) in `env` and return its function `fn_name`. The source is registered with linecache under
    `<ember-N-label>`, so tracebacks and debuggers show the generated lines."""
    filename = f"<ember-{next(_counter)}-{label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), env)  # noqa: S102 - ember's own generated source
    return env[fn_name]


def keyword_name(key: str) -> str:
    """A keyword argument's name, fit to print into generated source: an identifier, else `GraphError`. (Graph
    text reaches generated Python only as identifiers, `repr` literals and names ember made.)"""
    if not (isinstance(key, str) and is_source_identifier(key)):
        raise GraphError(f"keyword argument name {key!r} is not an identifier"[:200])
    return key


def direct_call(op: Any) -> Any:
    """An OpOverload's C++ entry point: what `OpOverload.__call__` forwards to, minus one Python frame per call."""
    direct = getattr(op, "_op", None)
    return direct if callable(direct) and getattr(op, "_schema", None) is not None else op


def returns_sequence(op: Any) -> bool:
    """Whether an op returns several values (a tuple or a list of tensors) rather than one."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return False
    rets = schema.returns
    return len(rets) > 1 or (len(rets) == 1 and "[]" in str(rets[0].type))
