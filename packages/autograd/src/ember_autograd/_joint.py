"""`joint(graph, example_inputs)`: the forward and backward of an ATen graph, traced ahead of time as one graph.

How: the graph is replayed with ember-core's Interpreter on fake primals under autograd, then
`torch.autograd.grad` runs on its differentiable outputs with one tangent each. make_fx records both halves,
functionalized (backward formulas may write in place) and decomposed to core ATen (random ops excepted, see
`ember_core.decompositions`). Nodes recorded while the forward ran are tagged `region=forward`, the rest `backward`.
Ops whose ATen derivative is missing or wrong (`aten.copy`) run with `ember_core.grad_rules`. Random ops run in
the forward only: the backward reads the masks the forward made (`native_dropout`'s second output), so no
partitioner has to run a random op twice.

The layout is `ember_core.JointGraph`'s. Inputs: the primals, with the graph's names, kinds and metadata
(`requires_grad` as decided here), then `tangent_{i}` for each differentiable forward output i. Outputs: the
forward outputs (the graph's kinds), then `Output(kind="grad", input=k)` for each primal k that has a gradient.
A forward output is differentiable, and has a tangent, exactly when its value has `requires_grad=True`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from ember_core import (
    EffectfulFunctionalMode,
    Graph,
    GraphError,
    Input,
    Interpreter,
    JointGraph,
    Output,
    SpecializationNeeded,
    decompositions,
    eager_derivatives,
    from_fx,
    grad_rules,
    is_impure_node,
    node_refs,
    symbolic_backward_formulas,
    tracing_lock,
    verify,
    without_saved_tensor_hooks,
)
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)
from torch._subclasses.functional_tensor import dispatch_functionalize
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from ._grad_boundaries import insert_grad_boundaries
from ._locations import Locations, location_meta
from ._primals import FakePrimals, differentiable_dtype, requires_grad
from ._run_time_scalars import run_time_scalar_forms
from ._symbols import SymbolTable

PRODUCER = "ember-autograd 0.1.0"
_REGION = "ember_region"  # fx meta key: set on every node recorded while the forward ran


# ATen's refusal (c10's Scalar::equal) to compare a Scalar holding a symbolic int with a number
_SYMBOLIC_SCALAR_REFUSAL = "NYI SymInt equality"

# FakeTensor's refusals of an op it cannot run without data; escaping the backend, Dynamo would turn them into a
# graph break that runs the graph eagerly with no ember event
_FAKE_REFUSALS = (UnsupportedOperatorException, DynamicOutputShapeException, DataDependentOutputException)


def joint(graph: Graph, example_inputs: Sequence[Any]) -> JointGraph:
    """The joint forward+backward graph of a functional ATen graph (layout in this module's docstring)."""
    grads = requires_grad(graph, example_inputs)
    with tracing_lock(), eager_derivatives(), without_saved_tensor_hooks():  # make_fx's state is process-wide
        trace = JointTrace(insert_grad_boundaries(graph), FakePrimals(graph, example_inputs, grads))
        try:
            gm = trace.run()
            _check_symbols_kept(graph, trace.primals.symbols)
        except GuardOnDataDependentSymNode as e:
            raise GraphError(_data_dependent(graph, e)) from e
        except _FAKE_REFUSALS as e:
            raise GraphError(f"graph {graph.name!r}: the joint trace's fake tensors cannot run "
                             f"{getattr(e, 'func', None) or type(e).__name__} ({type(e).__name__}: an op without a "
                             f"Meta kernel, or a result whose shape or value depends on the data)") from e
        except RuntimeError as e:
            ints = trace.primals.symbols.ints
            if ints and _SYMBOLIC_SCALAR_REFUSAL in str(e):
                # a C++ backward formula compares an int input given as a Scalar with a number (`pow`'s backward
                # asks whether the exponent is 0), which ATen cannot do for a symbolic int: traced at each value
                values = {name: trace.primals.symbols.hints[name] for name in ints}
                raise SpecializationNeeded(
                    f"graph {graph.name!r}: a backward formula in C++ compares an int input with a number, which it "
                    f"cannot do for a symbolic one: the graph is compiled per value of {', '.join(ints)}",
                    values) from e
            if trace.primals.symbols.shape_env is None:
                raise
            # ATen refusing symbolic sizes (a kernel without a symbolic form; a gradient whose size the trace's
            # symbols cannot prove equal to its input's, which Dynamo's guards related: slice_scatter's source
            # after its step was specialized): the graph runs under eager autograd, visibly
            first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise GraphError(f"graph {graph.name!r}: the joint trace of symbolic sizes failed: {first}") from e
    joint_graph = _to_graph(graph, gm, trace, grads)
    return JointGraph(verify(joint_graph), num_primals=len(graph.inputs), num_forward_outputs=len(graph.outputs))


def _check_symbols_kept(graph: Graph, symbols: SymbolTable) -> None:
    """Raise `SpecializationNeeded` when the trace fixed some of the graph's symbols (`SymbolTable.fixed`): the
    joint graph is then right at their traced values only, and the runtime compiles the graph per value of them."""
    fixed = symbols.fixed()
    if fixed:
        what = ", ".join(f"{name} = {by}" for name, by in sorted(fixed.items()))
        raise SpecializationNeeded(f"graph {graph.name!r}: the joint trace fixed {what} (a backward formula that "
                                   f"reads a size as an int): it is compiled per value of "
                                   f"{', '.join(sorted(fixed))}", {name: symbols.hints[name] for name in fixed})


def _data_dependent(graph: Graph, e: GuardOnDataDependentSymNode) -> str:
    """Why a joint trace stopped at a number read from a tensor at run time (`_local_scalar_dense`: `.item()`, a 0-d
    index tensor): a backward formula branches on it (`select_backward` on the sign of the index `u0 < 0`), and a
    trace cannot know which way. The graph then runs under eager autograd, which knows the number."""
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
    return (f"graph {graph.name!r}: the backward branches on a number read from a tensor at run time, which a "
            f"trace cannot follow ({first})")


class JointTrace:
    """One make_fx trace of forward + `autograd.grad`; remembers which outputs got tangents and which primals
    got gradients."""

    def __init__(self, graph: Graph, primals: FakePrimals):
        self.graph = graph
        self.primals = primals
        # ops ATen cannot differentiate; ops whose formulas branch on a number read at run time
        self.interpreter = Interpreter(graph, overrides={**grad_rules, **run_time_scalar_forms()})
        self.differentiable: list[bool] = []  # per forward output
        self.grad_inputs: list[int] = []  # primal index of each gradient output, in order

    def run(self) -> fx.GraphModule:
        tangents = self._tangents()
        fake = self.primals.mode
        fn = dispatch_functionalize(self._joint_fn, EffectfulFunctionalMode())
        # compiled autograd off: the joint's `autograd.grad` is traced here, not a backward to capture at run time
        with fake, enable_python_dispatcher(), torch.enable_grad(), torch.autograd.set_multithreading_enabled(False), \
                torch._dynamo.compiled_autograd._disable():
            table = decompositions() | (symbolic_backward_formulas() if self.primals.symbols.shape_env else {})
            gm = make_fx(fn, decomposition_table=table)(*self.primals.values, *tangents)
        _drop_aliases(gm)
        gm.graph.eliminate_dead_code(is_impure_node)  # random and effectful ops stay
        return gm

    def _tangents(self) -> list[torch.Tensor]:
        """Run the forward once on the fake primals to learn which outputs are differentiable; a contiguous
        tangent for each."""
        env = self.primals.symbols.shape_env
        probe = env.ignore_fresh_unbacked_symbols() if env is not None else contextlib.nullcontext()
        # the Python dispatcher as in `run`: without it, ops given symbolic size lists (`constant_pad_nd`) reach
        # C++ kernels that need concrete ones. A scalar this run reads is read again when traced (`probe`)
        with self.primals.mode, enable_python_dispatcher(), torch.enable_grad(), probe:
            outs = self.interpreter.run(self.primals.values)
            self.traced = [_differentiable(o) for o in outs]
            self.differentiable = [t or self._recorded(j, o) for j, (t, o) in enumerate(zip(self.traced, outs))]
            return [torch.empty(o.shape, dtype=o.dtype, device=o.device)
                    for o, d in zip(outs, self.differentiable) if d]

    def _recorded(self, j: int, out: Any) -> bool:
        """Eager autograd made output j require grad although its value does not depend on a primal's
        (`torch.fill(x, v)`, `x.zero_()`: ops with a zero derivative, which the graph computes from x's metadata
        alone). Such an output stays differentiable, and the primals it reads get zero gradients, as in eager."""
        value = self.graph.values[self.graph.outputs[j].name]
        return value.requires_grad and isinstance(out, torch.Tensor) and differentiable_dtype(out.dtype)

    def _joint_fn(self, *flat: Any) -> list[Any]:
        n = len(self.graph.inputs)
        primals, tangents = flat[:n], flat[n:]
        locations = Locations(get_proxy_mode().tracer.graph)
        self.interpreter.after_node = locations.after_node
        try:
            outs = self.interpreter.run(list(primals))
        finally:
            self.interpreter.after_node = None
        for node in get_proxy_mode().tracer.graph.nodes:
            node.meta[_REGION] = "forward"
        wrt = [(k, p) for k, p in enumerate(primals) if isinstance(p, torch.Tensor) and p.requires_grad]
        if [_differentiable(o) for o in outs] != self.traced:
            raise AssertionError("forward outputs changed differentiability between two traces")
        tangent_of = iter(tangents)
        pairs = [(o, next(tangent_of)) for o, d in zip(outs, self.differentiable) if d]
        traced = [(o, t) for o, t in pairs if _differentiable(o)]
        grads: list[torch.Tensor | None] = [None] * len(wrt)
        if traced and wrt:
            grads = list(torch.autograd.grad([o for o, _ in traced], [p for _, p in wrt], [t for _, t in traced],
                                             allow_unused=True))
        locations.finish()
        zero = self._zero_gradient_primals()
        grads = [torch.zeros_like(p) if g is None and k in zero else g for (k, p), g in zip(wrt, grads)]
        self.grad_inputs = [k for (k, _), g in zip(wrt, grads) if g is not None]
        return [*outs, *(g for g in grads if g is not None)]

    def _zero_gradient_primals(self) -> set[int]:
        """Primals that an output kept differentiable by `_recorded` reads (through any chain of nodes). Such an
        output may read primals' values only through ops that use nothing but their metadata (`full_like`): one
        whose value depends on a primal that requires grad lost its derivative in the trace (an op whose autograd
        make_fx cannot follow), and a zero gradient would be a wrong one, so the joint is refused (GraphError)."""
        forced = {self.graph.outputs[j].name for j, (t, d) in enumerate(zip(self.traced, self.differentiable))
                  if d and not t}
        if not forced:
            return set()
        producer = {o: n for n in self.graph.nodes for o in n.outputs}
        wants_grad = {inp.name for inp, p in zip(self.graph.inputs, self.primals.values)
                      if isinstance(p, torch.Tensor) and p.requires_grad}
        for name in forced:
            lost = _value_sources(name, producer) & wants_grad
            if lost:
                raise GraphError(f"graph {self.graph.name!r}: output {name!r} requires grad in eager and its value "
                                 f"depends on {sorted(lost)}, but the traced output has no gradient (an op whose "
                                 "derivative the joint trace cannot follow)")
        seen = _sources(forced, producer, metadata_stops=False)
        return {k for k, inp in enumerate(self.graph.inputs) if inp.name in seen}


# ops whose result depends on their tensor arguments' metadata (shape, dtype, device) alone
METADATA_ONLY = frozenset(f"aten.{name}" for name in (
    "full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default", "new_full.default",
    "new_zeros.default", "new_ones.default", "new_empty.default", "new_empty_strided.default", "sym_size.int",
    "sym_stride.int", "sym_numel.default", "sym_storage_offset.default"))


def _value_sources(name: str, producer: dict) -> set[str]:
    return _sources({name}, producer, metadata_stops=True)


def _sources(names: set[str], producer: dict, metadata_stops: bool) -> set[str]:
    """Every value `names` are computed from (themselves included); with `metadata_stops`, not past an op that
    reads only its arguments' metadata."""
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is not None and not (metadata_stops and node.op in METADATA_ONLY):
            stack.extend(node_refs(node))
    return seen


_ALIASES = (torch.ops.aten.alias.default, torch.ops.aten.detach.default)


def _drop_aliases(gm: fx.GraphModule) -> None:
    """Read through `aten.alias` and `aten.detach` (autograd's detached saved tensors, the program's own detaches):
    in a graph without mutation they read the same data as their source, and the joint's gradients are explicit
    by now. Those that are graph outputs stay, so that each output keeps its own value and differentiability."""
    for node in list(gm.graph.nodes):
        if node.target in _ALIASES and all(u.op != "output" for u in node.users):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)


def _differentiable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad and differentiable_dtype(x.dtype)


def _to_graph(graph: Graph, gm: fx.GraphModule, trace: JointTrace, grads: list[bool]) -> Graph:
    """The traced module as an ember Graph: names, kinds, regions and metadata of the joint layout."""
    tangent_names = [f"tangent_{i}" for i, d in enumerate(trace.differentiable) if d]
    inputs = [*(Input(i.name, i.kind, i.mutated) for i in graph.inputs), *(Input(t, "tangent") for t in tangent_names)]
    _name_placeholders(gm, trace.primals.symbols.traced_inputs(inputs, graph))
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["ember_meta"] = {"region": node.meta.get(_REGION, "backward"), **location_meta(node)}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(out_node.args[0])
    kinds = [*graph.outputs, *(Output("", "grad", k) for k in trace.grad_inputs)]
    out_node.meta["ember_outputs"] = [Output(r.name, o.kind, o.input) for r, o in zip(results, kinds)]
    traced = trace.primals.symbols.rename(from_fx(gm, name=f"{graph.name}_joint", producer=PRODUCER))
    values = dict(traced.values)
    for inp, grad in zip(graph.inputs, grads):  # the primals keep the graph's own records
        values[inp.name] = graph.values[inp.name].replace(requires_grad=grad)
    for out, d in zip(traced.outputs, trace.differentiable):
        values[out.name] = values[out.name].replace(requires_grad=d)
    return traced.replace(values=values)


def _name_placeholders(gm: fx.GraphModule, inputs: list[Input]) -> None:
    """Give the placeholders the inputs' names (other nodes step aside) and their ember records."""
    wanted = {i.name for i in inputs}
    taken = {n.name for n in gm.graph.nodes} | wanted
    for node in gm.graph.nodes:
        if node.op != "placeholder" and node.name in wanted:
            new = node.name + "_1"
            while new in taken:
                new += "_"
            taken.add(new)
            node.name = new
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise AssertionError(f"joint trace has {len(placeholders)} placeholders for {len(inputs)} inputs")
    for node, inp in zip(placeholders, inputs):
        node.name = inp.name
        node.meta["ember_input"] = inp
