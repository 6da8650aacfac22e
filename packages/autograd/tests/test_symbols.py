"""SymbolTable: the graph's symbols as SymInts, and names mapped back after tracing."""

from __future__ import annotations

import torch
from ember_autograd._symbols import SymbolTable
from ember_core import Graph, Input, Node, Output, Ref, Sym, Symbol, Value


def graph_with(symbols):
    v = Value(shape=("s0", "s1"), stride=("s1", 1))
    node = Node(("y",), "aten.view.default", (Ref("x"), (Sym("s0*s1"),)))
    return Graph("g", (Input("x"),), (node,), (Output("y"),), {"x": v, "y": Value(shape=("s0*s1",), stride=(1,))},
                 symbols)


def test_no_symbols_no_shape_env():
    assert SymbolTable(Graph()).shape_env is None


def test_dims_become_symints_with_the_hints():
    table = SymbolTable(graph_with((Symbol("s0", 3, 2), Symbol("s1", 5, 2))))
    d = table.dim("s0*s1 + 1")
    assert isinstance(d, torch.SymInt) and d.node.hint == 16
    assert table.dim(7) == 7


def test_rename_maps_shape_env_names_back():
    table = SymbolTable(graph_with((Symbol("s0", 3, 2), Symbol("s1", 5, 2))))
    env_names = {graph_name: env for env, graph_name in table.graph_names.items()}
    traced = graph_with((Symbol(env_names["s0"], 3), Symbol(env_names["s1"], 5)))
    traced = traced.replace(values={k: v.replace(shape=tuple(env_names.get(d, d) for d in v.shape))
                                    for k, v in traced.values.items()},
                            nodes=(traced.nodes[0].replace(args=(Ref("x"), (Sym(f"2*{env_names['s1']}"),))),))
    back = table.rename(traced)
    assert back.values["x"].shape == ("s0", "s1")
    assert back.nodes[0].args[1] == (Sym("2*s1"),)
    assert back.symbols == (Symbol("s0", 3, 2), Symbol("s1", 5, 2))


def test_symbols_with_the_same_hint_stay_apart():
    # duck sizing (a ShapeEnv's default for tensor sizes) would make two sizes that were both 4 when traced one
    # symbol, and the joint graph would then speak of one where the graph has two
    table = SymbolTable(graph_with((Symbol("s0", 4, 2), Symbol("s1", 4, 2))))
    assert table.symints["s0"].node.expr != table.symints["s1"].node.expr
    assert sorted(table.graph_names.values()) == ["s0", "s1"]
