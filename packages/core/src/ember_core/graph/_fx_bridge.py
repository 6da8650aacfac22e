"""ATen-level torch.fx ⇄ Graph.

`from_fx` reads a GraphModule whose nodes carry `meta["val"]` (fake tensors, SymInts) as make_fx leaves them.
`to_fx` builds a GraphModule and stamps each fx node with the ember records it came from (`meta["ember_*"]`),
so `from_fx(to_fx(g)) == g` exactly, and `to_fx(from_fx(gm))` has the same code as `gm` when `gm` returns a
tuple (a Graph's outputs are always a sequence, so a bare `return x` comes back as `return (x,)`).
A frontend may set `meta["ember_input"]` on placeholders and `meta["ember_outputs"]` on the output node to give
input and output kinds (mutations, aliases, params). A graph's subgraphs travel as Graphs in the module's
`meta["ember_graph"]["subgraphs"]`: fx has no form for them that `from_fx` could read back exactly.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .._errors import GraphError
from ._checkpoint import checkpoint_meta, number_regions
from ._dtypes import dtype_name
from ._ops import op_name, resolve_op
from ._schema import INT64_MIN, Constant, Graph, Input, Node, Output, Ref, Sym, Symbol, Value, node_refs
from ._symbolic import expr_text, free_symbols

# ---------------------------------------------------------------------------------------------- values


def _dim(d: Any) -> int | str:
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if expr.is_number else expr_text(expr)
    return int(d)


def value_of(val: Any) -> Value:
    """The schema record for one traced value (a tensor, fake tensor, SymInt or Python scalar)."""
    if isinstance(val, torch.Tensor):
        return Value(
            type="tensor",
            dtype=dtype_name(val.dtype),
            shape=tuple(_dim(d) for d in val.shape),
            stride=tuple(_dim(d) for d in val.stride()),
            device=str(val.device),
            requires_grad=bool(val.requires_grad),
            storage_offset=_dim(val.storage_offset()),
        )
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        dtype = {torch.SymInt: "int64", torch.SymFloat: "float64", torch.SymBool: "bool"}[type(val)]
        return Value(type="sym", dtype=dtype)
    if isinstance(val, bool):
        return Value(type="scalar", dtype="bool")
    if isinstance(val, int):
        return Value(type="scalar", dtype="int64")
    if isinstance(val, float):
        return Value(type="scalar", dtype="float64")
    if val is None:
        return Value(type="none", dtype="bool")
    raise GraphError(f"cannot describe traced value of type {type(val).__name__}")


def _symbols_in(values: dict[str, Value], vals: list[Any]) -> tuple[Symbol, ...]:
    """Declare every symbol the values mention, with hint and range from the fake tensors' shape env."""
    names: set[str] = set()
    for v in values.values():
        for d in (*v.shape, *v.stride, v.storage_offset):
            names |= free_symbols(d)
    shape_env = _shape_env(vals)
    symbols = []
    for name in sorted(names, key=lambda n: (n[0], int(n[1:]) if n[1:].isdigit() else 0, n)):
        hint, lower, upper = 0, 0, None
        if shape_env is not None:
            known = getattr(shape_env, "backed_var_to_val", None) or shape_env.var_to_val
            sym = next((s for s in known if s.name == name), None)
            if sym is not None:
                hint = int(known[sym])
                rng = shape_env.var_to_range.get(sym)
                if rng is not None:
                    lower = _finite(rng.lower, INT64_MIN)  # an int the program passed: maybe negative
                    upper = _finite(rng.upper, None)
        symbols.append(Symbol(name, hint, lower, upper))
    return tuple(symbols)


def _finite(bound: Any, default: int | None) -> int | None:
    try:
        return int(bound) if bool(bound.is_finite) and bound.is_number else default
    except (TypeError, ValueError, AttributeError, OverflowError):
        return default


def _shape_env(vals: list[Any]):
    for val in vals:
        if isinstance(val, torch.SymInt):
            return val.node.shape_env
        if isinstance(val, torch.Tensor):
            for d in (*val.shape, *val.stride()):
                if isinstance(d, torch.SymInt):
                    return d.node.shape_env
    return None


# ---------------------------------------------------------------------------------------------- fx → Graph


def _to_arg(a: Any) -> Any:
    if isinstance(a, fx.Node):
        return Ref(a.name)
    if isinstance(a, (list, tuple)):
        return tuple(_to_arg(x) for x in a)
    if isinstance(a, torch.SymInt):
        return Sym(expr_text(a.node.expr))
    if isinstance(a, (torch.SymFloat, torch.SymBool)):
        raise GraphError(f"symbolic float/bool argument {a} must be a graph value")
    return a


# a source file's base name → the paths of the files of that name graphs were read from in this process (the
# report shows a node's line from its file when one path goes with the name, `report/_sources.py`; the graph keeps
# the base name only)
SOURCE_PATHS: dict[str, set[str]] = {}


def _node_meta(node: fx.Node) -> dict[str, str]:
    if "ember_meta" in node.meta:
        return dict(node.meta["ember_meta"])
    meta: dict[str, str] = {}
    trace = node.meta.get("stack_trace")
    if trace:
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
        if lines:
            # 'File "/path/model.py", line 12, in forward' → 'model.py:12'
            last = lines[-1]
            path = last.split('"')[1] if '"' in last else "?"
            line = last.split("line ")[1].split(",")[0] if "line " in last else "?"
            name = path.rsplit("/", 1)[-1]
            meta["source"] = f"{name}:{line}"
            SOURCE_PATHS.setdefault(name, set()).add(path)
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        meta["module"] = str(path).replace("L['self'].", "").replace("L__self___", "")
    meta.update(checkpoint_meta(node.meta))
    return meta


def from_fx(gm: fx.GraphModule, *, name: str | None = None, producer: str | None = None) -> Graph:
    """Read an ATen-level GraphModule. Every node needs `meta["val"]` (or an `ember_value` from `to_fx`)."""
    info = gm.meta.get("ember_graph", {})
    inputs: list[Input] = []
    nodes: list[Node] = []
    values: dict[str, Value] = {}
    constants: dict[str, Constant] = {}
    outputs: list[Output] = []
    multi: dict[str, list[str]] = {}  # fx name of a tuple-returning node → its output names
    vals: list[Any] = []
    from_torch: set[int] = set()  # nodes whose meta comes from torch's (not an ember graph's, `to_fx`)

    def record(fx_node: fx.Node, out_name: str, val: Any, stamped: Value | None) -> None:
        vals.append(val)
        values[out_name] = stamped if stamped is not None else value_of(val)

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            inputs.append(n.meta.get("ember_input", Input(n.name)))
            record(n, n.name, n.meta.get("val"), n.meta.get("ember_value"))
        elif n.op == "get_attr":
            tensor = getattr(gm, n.target)
            constants[n.name] = Constant(n.name, tensor.detach())
        elif n.op == "call_function" and n.target is operator.getitem and n.args[0].name in multi:
            src, idx = n.args
            multi[src.name][idx] = n.name
        elif n.op == "call_function":
            op = op_name(n.target)
            val = n.meta.get("val")
            stamped = n.meta.get("ember_values")
            if isinstance(val, (list, tuple)) or stamped is not None:
                multi[n.name] = [f"{n.name}_{i}" for i in range(len(stamped if stamped is not None else val))]
            args, kwargs = tuple(_to_arg(a) for a in n.args), {k: _to_arg(v) for k, v in n.kwargs.items()}
            node = Node((n.name,), op, args, kwargs, _node_meta(n))
            if "ember_meta" not in n.meta:
                from_torch.add(len(nodes))
            nodes.append(node)
            if n.name not in multi:
                record(n, n.name, val, n.meta.get("ember_value"))
        elif n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (list, tuple)) else (n.args[0],)
            stamped = n.meta.get("ember_outputs")
            for k, o in enumerate(outs):
                if not isinstance(o, fx.Node):
                    raise GraphError(f"graph output {k} is {o!r}, not a value of the graph")
                outputs.append(stamped[k] if stamped else Output(o.name))
        else:
            raise GraphError(f"fx node {n.name!r}: opcode {n.op!r} is not allowed in an ATen graph")

    nodes = number_regions(_finish_multi(gm, nodes, multi, values, vals), from_torch)
    values = {k: values[k] for k in _definition_order(inputs, nodes) if k in values}
    g_outputs = tuple(outputs)
    symbols = info.get("symbols")
    return Graph(
        name=name or info.get("name") or "graph",
        inputs=tuple(inputs),
        nodes=tuple(nodes),
        outputs=g_outputs,
        values=values,
        symbols=symbols if symbols is not None else _symbols_in(values, vals),
        constants=constants,
        producer=producer if producer is not None else info.get("producer", ""),
        **({"version": info["version"]} if "version" in info else {}),
        subgraphs=dict(info.get("subgraphs", {})),
    )


def _finish_multi(
    gm, nodes: list[Node], multi: dict[str, list[str]], values: dict[str, Value], vals: list
) -> list[Node]:
    """Give tuple-returning nodes their output names; remember the fx name so `to_fx` can restore it."""
    fx_nodes = {n.name: n for n in gm.graph.nodes}
    done = []
    for node in nodes:
        fx_name = node.outputs[0]
        if fx_name in multi:
            outs = tuple(multi[fx_name])
            fx_node = fx_nodes[fx_name]
            stamped = fx_node.meta.get("ember_values")
            for i, o in enumerate(outs):
                val = fx_node.meta["val"][i] if "val" in fx_node.meta else None
                if stamped is not None:
                    values[o] = stamped[i]
                else:
                    vals.append(val)
                    values[o] = value_of(val)
            meta = node.meta if fx_name == outs[0] + "_tuple" else {**node.meta, "name": fx_name}
            node = node.replace(outputs=outs, meta=meta)
        done.append(node)
    return done


def _definition_order(inputs: list[Input], nodes: list[Node]) -> list[str]:
    return [i.name for i in inputs] + [o for n in nodes for o in n.outputs]


# ---------------------------------------------------------------------------------------------- Graph → fx


def to_fx(graph: Graph) -> fx.GraphModule:
    """An fx GraphModule that runs the graph with torch.ops; each fx node keeps its ember record in meta."""
    b = _FxBuilder(graph)
    for inp in graph.inputs:
        b.placeholder(inp)
    for node in graph.nodes:
        b.call(node)
    b.fetch_constants(o.name for o in graph.outputs)
    b.fetch_constants(graph.constants)  # constants nothing reads (a pass left them for a later one): kept too
    out = b.g.output(tuple(b.env[o.name] for o in graph.outputs))
    out.meta["ember_outputs"] = list(graph.outputs)
    gm = fx.GraphModule(b.root, b.g)
    gm.meta["ember_graph"] = {
        "name": graph.name, "producer": graph.producer, "symbols": graph.symbols, "version": graph.version,
        "subgraphs": dict(graph.subgraphs),
    }
    return gm


class _FxBuilder:
    """Builds the fx graph of `to_fx`, one ember record at a time; `env` maps value names to fx nodes."""

    def __init__(self, graph: Graph) -> None:
        self.graph, self.root, self.g = graph, torch.nn.Module(), fx.Graph()
        self.env: dict[str, fx.Node] = {}
        for name, c in graph.constants.items():
            self.root.register_buffer(name, c.tensor)

    def _named(self, n: fx.Node, name: str) -> fx.Node:
        n.name = name
        self.env[name] = n
        return n

    def arg(self, a: Any) -> Any:
        if isinstance(a, Ref):
            return self.env[a.name]
        if isinstance(a, Sym):
            raise GraphError(f"symbolic expression argument {a.expr!r} has no fx form; make it a graph value")
        if isinstance(a, tuple):
            return [self.arg(x) for x in a]
        return a

    def placeholder(self, inp: Input) -> None:
        n = self._named(self.g.placeholder(inp.name), inp.name)
        n.meta.update(ember_input=inp, ember_value=self.graph.values[inp.name])

    def fetch_constants(self, names) -> None:
        """get_attr nodes just before a constant's first use, where make_fx puts them."""
        for name in names:
            if name in self.graph.constants and name not in self.env:
                self._named(self.g.get_attr(name), name)

    def call(self, node: Node) -> None:
        self.fetch_constants(node_refs(node))
        target = resolve_op(node.op)
        n = self.g.call_function(target, tuple(self.arg(a) for a in node.args),
                                 {k: self.arg(v) for k, v in node.kwargs.items()})
        if len(node.outputs) == 1 and not _returns_tuple(target):
            self._named(n, node.outputs[0]).meta.update(ember_value=self.graph.values[node.outputs[0]],
                                                        ember_meta=node.meta)
            return
        n.name = node.meta.get("name", node.outputs[0] + "_tuple")
        n.meta.update(ember_values=[self.graph.values[o] for o in node.outputs], ember_meta=node.meta)
        for i, o in enumerate(node.outputs):  # every item, so names survive a round trip
            self._named(self.g.call_function(operator.getitem, (n, i)), o)


def _returns_tuple(target: Any) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return False
    rets = target._schema.returns
    return len(rets) > 1 or (len(rets) == 1 and isinstance(rets[0].type, torch.ListType))


