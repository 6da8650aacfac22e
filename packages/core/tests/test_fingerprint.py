"""fingerprint(): equal for graphs that differ only in names and locations; different for any other change."""

import ember_core as ec
import pytest
import torch
from ember_core import Constant, Graph, Input, Node, Output, Ref, Sym, Symbol, Value
from ember_core.testing import battery_case, battery_names


def _renamed_arg(arg, names):
    if isinstance(arg, Ref):
        return Ref(names[arg.name])
    if isinstance(arg, tuple):
        return tuple(_renamed_arg(a, names) for a in arg)
    return arg


def renamed(g: Graph, prefix: str = "renamed_") -> Graph:
    """The graph with every value and constant name prefixed, and the graph renamed."""
    names = {n: prefix + n for n in [*g.values, *g.constants]}
    return g.replace(
        name=prefix + g.name,
        inputs=tuple(Input(names[i.name], i.kind, i.mutated) for i in g.inputs),
        nodes=tuple(n.replace(outputs=tuple(names[o] for o in n.outputs), args=_renamed_arg(n.args, names),
                              kwargs={k: _renamed_arg(v, names) for k, v in n.kwargs.items()}) for n in g.nodes),
        outputs=tuple(Output(names[o.name], o.kind, o.input) for o in g.outputs),
        values={names[k]: v for k, v in g.values.items()},
        constants={names[k]: Constant(names[k], c.tensor) for k, c in g.constants.items()},
    )


def with_meta(g: Graph, **meta: str) -> Graph:
    return g.replace(nodes=tuple(n.replace(meta=n.meta | meta) for n in g.nodes))


def small(scale: float = 2.0, const: float = 1.0, op: str = "aten.mul.Tensor") -> Graph:
    vec = Value(shape=(4,), stride=(1,))
    return Graph(
        name="small",
        inputs=(Input("x"),),
        nodes=(Node(("a",), op, (Ref("x"), scale), meta={"source": "m.py:1"}),
               Node(("b",), "aten.add.Tensor", (Ref("a"), Ref("c")))),
        outputs=(Output("b"),),
        values={"x": vec, "a": vec, "b": vec},
        constants={"c": Constant("c", torch.full((4,), const))},
    )


@pytest.mark.parametrize("name", battery_names())
def test_fingerprint_ignores_value_names_and_sources(name):
    g = battery_case(name).graph
    changed = with_meta(renamed(g), source="elsewhere.py:99", module="other.path")
    assert ec.fingerprint(changed) == ec.fingerprint(g)


def test_fingerprint_ignores_fx_names_of_tuple_nodes():
    g = battery_case("multi_output").graph
    assert any("name" in n.meta for n in g.nodes)
    assert ec.fingerprint(with_meta(g, name="other_fx_name")) == ec.fingerprint(g)


def test_fingerprint_ignores_graph_name_and_producer():
    assert ec.fingerprint(small().replace(name="other", producer="x 1.0")) == ec.fingerprint(small())


def test_fingerprint_ignores_symbol_names():
    def sym_graph(s: str) -> Graph:
        v = Value(shape=(s, 4), stride=(4, 1))
        return Graph(symbols=(Symbol(s, 8, 2),), inputs=(Input("x"),),
                     nodes=(Node(("y",), "aten.view.default", (Ref("x"), (Sym(f"4*{s}"),))),),
                     outputs=(Output("y"),), values={"x": v, "y": Value(shape=(f"4*{s}",), stride=(1,))})
    assert ec.fingerprint(sym_graph("s0")) == ec.fingerprint(sym_graph("s75"))


def test_fingerprint_changes_with_an_op():
    assert ec.fingerprint(small(op="aten.div.Tensor")) != ec.fingerprint(small())


def test_fingerprint_changes_with_a_constant_value():
    assert ec.fingerprint(small(const=1.5)) != ec.fingerprint(small())


def test_fingerprint_changes_with_a_scalar_argument():
    assert ec.fingerprint(small(scale=3.0)) != ec.fingerprint(small())


def test_fingerprint_changes_with_a_shape_or_dtype():
    g = small()
    half = g.values["x"].replace(dtype="float16")
    assert ec.fingerprint(g.replace(values=g.values | {"x": half})) != ec.fingerprint(g)
    assert ec.fingerprint(g.replace(values=g.values | {"x": Value(shape=(5,), stride=(1,))})) != ec.fingerprint(g)


def test_fingerprint_changes_with_an_output_kind():
    g = small()
    assert ec.fingerprint(g.replace(outputs=(Output("b", "saved"),))) != ec.fingerprint(g)


def test_fingerprint_keeps_the_region():
    assert ec.fingerprint(with_meta(small(), region="backward")) != ec.fingerprint(small())


def test_fingerprint_survives_json_and_fx_round_trips():
    g = battery_case("constants").graph
    assert ec.fingerprint(ec.loads(ec.dumps(g))) == ec.fingerprint(g) == ec.fingerprint(ec.from_fx(ec.to_fx(g)))


def test_fingerprint_is_a_short_hex_digest():
    fp = ec.fingerprint(small())
    assert len(fp) == 32 and int(fp, 16) >= 0


def test_canonical_names_values_in_definition_order():
    c = ec.canonical(small())
    assert [i.name for i in c.inputs] == ["%0"] and [n.outputs for n in c.nodes] == [("%2",), ("%3",)]
    assert list(c.constants) == ["%1"] and c.nodes[0].meta == {}


def test_fingerprint_with_names_tells_renamed_graphs_apart():
    g = small()
    assert ec.fingerprint(renamed(g), names=True) != ec.fingerprint(g, names=True)
    assert ec.fingerprint(g.replace(name="other"), names=True) != ec.fingerprint(g, names=True)


def test_fingerprint_with_names_still_ignores_sources_and_producer():
    g = small()
    moved = with_meta(g, source="elsewhere.py:99", module="other.path", stack="f").replace(producer="x 2.0")
    assert ec.fingerprint(moved, names=True) == ec.fingerprint(g, names=True)


def test_fingerprint_with_names_changes_with_anything_else():
    assert ec.fingerprint(small(op="aten.div.Tensor"), names=True) != ec.fingerprint(small(), names=True)
    assert ec.fingerprint(small(const=1.5), names=True) != ec.fingerprint(small(), names=True)
