"""Reference joint graphs and a reference partition, for testing autograd and partitioner plugins without either.

`trace_joint(fn, primals)` traces `fn` and `torch.autograd.grad` of its outputs (tangents as inputs) with make_fx
under functionalization, and stamps the `JointGraph` layout: input kinds, `mutation` outputs for inputs written in
place, `grad` outputs, and each node's region (forward: what the forward outputs need). `joint_case(name)` is the
joint graph of a battery case. `RegionPartitioner` splits a joint graph by region, saving every forward value the
backward reads: the simplest correct partition. `run_joint` / `run_partition` run both forms on real inputs.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from ..execution._effects import is_impure_node
from ..execution._interpreter import interpret
from ..graph._fx_bridge import from_fx
from ..graph._schema import Graph, Input, Output, node_refs
from ..graph._verify import verify
from ..plugins._stages import JointGraph, Partition
from ._battery import TRACE_SIZE, battery_spec


@dataclass(frozen=True)
class JointCase:
    """A joint graph and real inputs for it: primals, then tangents."""

    joint: JointGraph
    primals: list
    tangents: list

    @property
    def inputs(self) -> list:
        return [*self.primals, *self.tangents]


# ---------------------------------------------------------------------------------------------- tracing


def trace_joint(fn: Callable, primals: Sequence[Any], kinds: Sequence[str] | None = None, *,
                decompose: bool = False, functional: bool = True, mode: str = "fake",
                name: str = "joint") -> JointCase:
    """The joint graph of `fn` at `primals`: tensors with requires_grad get gradients. `kinds` are the primals'
    input kinds (default `user`); `decompose` traces to core ATen; `mode` is make_fx's tracing mode."""
    primals = list(primals)
    layout: dict[str, Any] = {}
    tangents = _tangents(fn, primals)
    wants_grad = [_wants_grad(p) for p in primals]

    def joint(primals: list, tangents: list) -> list:  # make_fx names the inputs primals_1 ..., tangents_1 ...
        return _joint_fn(fn, wants_grad, functional, layout, primals, tangents)

    context = FunctionalTensorMode(_allow_token_discovery=True) if functional else contextlib.nullcontext()
    decomposition = torch._decomp.core_aten_decompositions() if decompose else None
    with enable_python_dispatcher(), context:
        gm = make_fx(joint, tracing_mode=mode, decomposition_table=decomposition,
                     _allow_non_fake_inputs=True)(primals, tangents)  # module-level constant tensors
    gm.graph.eliminate_dead_code(is_impure_node)
    gm.recompile()
    graph = _stamp(from_fx(gm, name=name), layout, kinds, len(primals))
    return JointCase(graph, primals, tangents)


def _joint_fn(fn: Callable, wants_grad: list[bool], functional: bool, layout: dict, primals: list,
              tangents: list) -> list:
    """What make_fx traces: the forward, `autograd.grad` of its differentiable outputs, and the layout seen."""
    if functional:
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)):
            primals, tangents = [_to_fun(p) for p in primals], [_to_fun(t) for t in tangents]
    outs = _as_tuple(fn(*primals))
    diff = [o for o in outs if _wants_grad(o)]
    wrt = [p for p, w in zip(primals, wants_grad) if w]
    grads = torch.autograd.grad(diff, wrt, tangents, allow_unused=True) if diff and wrt else [None] * len(wrt)
    mutated = [k for k, p in enumerate(primals) if functional and _mutated(p)]
    wrt_index = [k for k, w in enumerate(wants_grad) if w]
    layout.update(n_user=len(outs), mutated=mutated, grads=[k for k, g in zip(wrt_index, grads) if g is not None])
    results = [*outs, *(primals[k] for k in mutated), *(g for g in grads if g is not None)]
    return [_from_fun(r) for r in results]


def _wants_grad(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def _mutated(p: Any) -> bool:
    return isinstance(p, FunctionalTensor) and torch._functionalize_has_data_mutation(p.elem)


def _to_fun(t: Any) -> Any:
    return FunctionalTensor.to_functional(t) if isinstance(t, torch.Tensor) else t


def _from_fun(t: Any) -> Any:
    if isinstance(t, FunctionalTensor):
        torch._sync(t)
        return torch._from_functional_tensor(t.elem)
    return t


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _tangents(fn: Callable, primals: list) -> list:
    """One random tangent per differentiable output, from a run of `fn` on copies of the primals."""
    copies = [p.detach().clone().requires_grad_(p.requires_grad) if isinstance(p, torch.Tensor) else p
              for p in primals]
    with torch.random.fork_rng():
        outs = _as_tuple(fn(*copies))
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs if _wants_grad(o)]


def _stamp(graph: Graph, layout: dict, kinds: Sequence[str] | None, n_primals: int) -> JointGraph:
    """Input kinds, output kinds (user, mutation, grad) and node regions of a traced joint graph."""
    kinds = list(kinds or ["user"] * n_primals)
    mutated = set(layout["mutated"])
    inputs = [Input(i.name, kinds[k], k in mutated) if k < n_primals else Input(i.name, "tangent")
              for k, i in enumerate(graph.inputs)]
    outs, n_user, n_mut = graph.outputs, layout["n_user"], len(layout["mutated"])
    outputs = [Output(o.name) for o in outs[:n_user]]
    outputs += [Output(o.name, "mutation", k) for o, k in zip(outs[n_user:n_user + n_mut], layout["mutated"])]
    outputs += [Output(o.name, "grad", k) for o, k in zip(outs[n_user + n_mut:], layout["grads"])]
    n_fwd = n_user + n_mut
    forward = _ancestors(graph, [o.name for o in outputs[:n_fwd]])
    nodes = [n.replace(meta={**n.meta, "region": "forward" if i in forward else "backward"})
             for i, n in enumerate(graph.nodes)]
    stamped = graph.replace(inputs=tuple(inputs), outputs=tuple(outputs), nodes=tuple(nodes))
    return JointGraph(verify(stamped), n_primals, n_fwd)


def _ancestors(graph: Graph, names: list[str]) -> set[int]:
    """Indices of the nodes the named values depend on."""
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    seen: set[int] = set()
    todo = list(names)
    while todo:
        i = producer.get(todo.pop())
        if i is not None and i not in seen:
            seen.add(i)
            node = graph.nodes[i]
            todo += list(node_refs(node))
    return seen


# ---------------------------------------------------------------------------------------------- the battery


def with_grad(inputs: Sequence[Any], frozen: Sequence[int] = ()) -> list:
    """Fresh copies of the inputs; floating tensors require grad, except those at the indices `frozen`."""
    return [x.detach().clone().requires_grad_(x.dtype.is_floating_point and k not in frozen)
            if isinstance(x, torch.Tensor) else x for k, x in enumerate(inputs)]


@functools.cache
def joint_case(name: str) -> JointCase:
    """The joint graph of battery case `name` (its functional form), floating inputs requiring grad (cached)."""
    spec = battery_spec(name)
    primals = with_grad(spec.make_inputs(TRACE_SIZE, torch.Generator().manual_seed(0)))
    mode = "symbolic" if spec.symbolic else "fake"
    return trace_joint(spec.fn, primals, mode=mode, name=f"{name}_joint")


# ---------------------------------------------------------------------------------------------- running


def run_joint(case: JointCase, seed: int = 123) -> list:
    """The joint graph's outputs on the case's inputs, through the reference interpreter."""
    torch.manual_seed(seed)
    return interpret(case.joint.graph, case.inputs)


def run_partition(case: JointCase, partition: Partition, seed: int = 123) -> list:
    """Forward, then backward on the saved values and tangents: the joint's outputs, in the joint's order."""
    torch.manual_seed(seed)
    forward = interpret(partition.forward, case.primals)
    n = case.joint.num_forward_outputs
    grads = interpret(partition.backward, [*forward[n:], *case.tangents])
    return [*forward[:n], *grads]


# ---------------------------------------------------------------------------------------------- a reference partition


class RegionPartitioner:
    """The simplest correct partitioner: forward-region nodes to the forward graph, the rest to the backward, and
    every primal or forward value the backward reads saved."""

    name = "region"

    def partition(self, joint: JointGraph, options: Mapping[str, Any] | None = None) -> Partition:
        g = joint.graph
        primals, tangents = g.inputs[:joint.num_primals], g.inputs[joint.num_primals:]
        forward_outputs, grads = g.outputs[:joint.num_forward_outputs], g.outputs[joint.num_forward_outputs:]
        fw_nodes = [n for n in g.nodes if n.meta.get("region") == "forward"]
        bw_nodes = [n for n in g.nodes if n.meta.get("region") != "forward"]
        made_by_forward = {i.name for i in primals} | {o for n in fw_nodes for o in n.outputs}
        reads = [r for n in bw_nodes for r in node_refs(n)]
        saved = tuple(dict.fromkeys(r for r in [*reads, *(o.name for o in grads)] if r in made_by_forward))
        forward = _subgraph(g, g.name + "_forward", primals, fw_nodes,
                            [*forward_outputs, *(Output(s, "saved") for s in saved)])
        backward = _subgraph(g, g.name + "_backward", [*(Input(s, "saved") for s in saved), *tangents], bw_nodes,
                             grads)
        return Partition(forward, backward, saved, report=f"{len(saved)} saved values: {', '.join(saved)}")


def _subgraph(g: Graph, name: str, inputs: Sequence[Input], nodes: Sequence, outputs: Sequence[Output]) -> Graph:
    names = {i.name for i in inputs} | {o for n in nodes for o in n.outputs} | {o.name for o in outputs}
    values = {k: v for k, v in g.values.items() if k in names}
    return Graph(name, tuple(inputs), tuple(nodes), tuple(outputs), values, g.symbols, dict(g.constants))
