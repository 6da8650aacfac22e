"""Symbolic sizes while tracing: a graph's symbols as SymInts of a fresh ShapeEnv, and the traced graph's symbols
renamed back to the graph's names.

A ShapeEnv names its symbols itself (`s27`, from a hash of the source), so the joint graph comes out of make_fx
with names of its own; `rename` maps them back, so that the joint graph speaks of the same `s0` as its input.
"""

from __future__ import annotations

from typing import Any

from ember_core import Graph, GraphError, Input, Symbol, dim_value, rename_symbols
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv


class SymbolTable:
    """The graph's symbols as SymInts of one ShapeEnv (none when the graph has no symbols)."""

    def __init__(self, graph: Graph):
        # a ShapeEnv also gives a scalar read out of a tensor (`.item()`) a symbol while tracing, where a fake
        # tensor has no value to read
        reads_scalars = any(n.op == "aten._local_scalar_dense.default" for n in graph.nodes)
        self.shape_env = ShapeEnv() if graph.symbols or reads_scalars else None
        self.symints: dict[str, Any] = {}  # graph's symbol name → SymInt
        self.graph_names: dict[str, str] = {}  # ShapeEnv's symbol name → graph's symbol name
        self.hints: dict[str, int] = {}  # graph's symbol name → its value when traced
        self.ints: list[str] = []  # the graph's int inputs that carry no size (`add(size=False)`)
        self.symbols: dict[str, Symbol] = {s.name: s for s in graph.symbols}
        for s in graph.symbols:
            self.add(s.name, s.hint, size=s.lower >= 0)  # a declared int that may be negative is no size

    def add(self, name: str, hint: int, size: bool = True) -> Any:
        """A new symbol called `name` in the graph, with the value `hint` when traced: a size (never negative) or,
        `size=False`, an int the graph takes as an input, which may be any int (a dim of -1, a negative factor)."""
        from torch._dynamo.source import ConstantSource

        if self.shape_env is None:
            self.shape_env = ShapeEnv()
        source = ConstantSource(f"ember_{name}")
        expr = self.shape_env.create_symbol(hint, source, dynamic_dim=DimDynamic.DYNAMIC,
                                            positive=True if size else None, do_not_specialize_zero_one=True)
        symint = self.shape_env.create_symintnode(expr, hint=hint, source=source)
        self.symints[name] = symint
        self.graph_names[str(expr)] = name
        self.hints[name] = hint
        self.symbols.setdefault(name, Symbol(name, hint))
        if not size:
            self.ints.append(name)
        return symint

    def fixed(self) -> dict[str, str]:
        """The graph's symbols that the trace replaced (the ShapeEnv's `replacements`): each with what replaced it,
        in the graph's names. A formula that reads a size as an int (`guard_int`) replaces it by its value, one that
        needs two sizes equal replaces one by the other; the trace then holds that value, valid at it only."""
        if self.shape_env is None:
            return {}
        fixed = {}
        for symbol, by in self.shape_env.replacements.items():
            name = self.graph_names.get(str(symbol))
            if name is not None and by != symbol:
                fixed[name] = str(rename_symbols_in(by, self.graph_names))
        return fixed

    def dim(self, d: int | str) -> Any:
        """A dimension of the schema (an int or an expression over the graph's symbols) as an int or SymInt."""
        try:
            return dim_value(d, self.symints)
        except KeyError as e:
            raise GraphError(f"size {d!r} uses symbol {e.args[0]!r}, which the graph does not declare") from None

    def traced_inputs(self, inputs: list[Input], graph: Graph) -> list[Input]:
        """`inputs` as the trace calls them: a `sym` input is named after the symbol it carries, which in the trace
        is the ShapeEnv's name (`rename` maps the two back together). With the graph's names on the inputs and the
        trace's in the sizes, one name could mean two things: graph's `s2` is the ShapeEnv's `s6` while the graph
        has an input `s6` of its own."""
        env_names = {name: env for env, name in self.graph_names.items()}
        carried = {i.name: env_names[i.name] for i in inputs
                   if i.name in env_names and (v := graph.values.get(i.name)) is not None and v.type == "sym"}
        clash = sorted(set(carried.values()) & ({i.name for i in inputs} - set(carried)))
        if clash:
            raise GraphError(f"graph {graph.name!r}: the trace names a symbol {clash[0]!r}, the name of an input "
                             "that carries no symbol")
        return [Input(carried.get(i.name, i.name), i.kind, i.mutated) for i in inputs]

    def rename(self, graph: Graph) -> Graph:
        """The traced graph with the ShapeEnv's symbol names replaced by the graph's, and their records."""
        if not self.graph_names:
            return graph
        renamed = rename_symbols(graph, self.graph_names)
        return renamed.replace(symbols=_ordered(tuple(self.symbols.get(s.name, s) for s in renamed.symbols)))


def rename_symbols_in(expr: Any, names: dict[str, str]) -> Any:
    """A ShapeEnv expression with its symbols called by the graph's names."""
    return expr.xreplace({s: type(s)(names[s.name], **s.assumptions0) for s in expr.free_symbols if s.name in names})


def _ordered(symbols: tuple[Symbol, ...]) -> tuple[Symbol, ...]:
    unique = {s.name: s for s in symbols}
    return tuple(unique[n] for n in sorted(unique, key=lambda n: (n[0], int(n[1:]) if n[1:].isdigit() else 0, n)))

