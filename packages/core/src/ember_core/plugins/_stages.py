"""The contracts between stages. A plugin implements one of these Protocols and registers it by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..graph._schema import Graph

STAGES = ("frontend", "pass", "autograd", "partition", "codegen")
# Where graph passes run, in pipeline order. Every graph pass, built in or a plugin's, is a `GraphPass` registered at
# one of them (`registry.add("pass", id, impl, point=...)`), run by `run_graph_passes`:
# - post_capture: each graph a frontend captured (the runtime; the example plugin's fold-mul-one, channels-last);
# - pre_autograd: a graph about to be traced with its backward (the runtime, training only);
# - post_partition: the forward and backward graphs of a partition (the runtime);
# - freeze: an inference graph whose parameters were just bound as constants (the runtime's freezing);
# - pre_lowering: the graph a codegen of the loop IR lowers (ember-lowering: fold-scatter-adds...).
PASS_POINTS = ("post_capture", "pre_autograd", "post_partition", "freeze", "pre_lowering")

# compile_graph(graph, example_inputs) -> a callable taking the graph's inputs as a list, returning its outputs.
CompileGraph = Callable[[Graph, Sequence[Any]], Callable[[Sequence[Any]], list]]


@dataclass(frozen=True, slots=True, weakref_slot=True)  # weakly held by the runtime's in-process cache
class CompiledGraph:
    """What a codegen returns: `fn(inputs) -> outputs` (lists, in the graph's order) and its source for dumps.

    `consume`, where a codegen offers it, is `fn` taking the list over: it empties the list once it has checked
    the inputs and drops each input after its last use, so an input nobody else holds is freed while the call
    runs (a backward's saved values: autograd's own backward frees each as it is used). Its fallbacks cannot run
    again on inputs it let go: it raises `InputsConsumed` instead, and the caller decides (remakes them, or calls
    `fn`)."""

    fn: Callable[[Sequence[Any]], list]
    graph: Graph
    codegen: str
    source: str = ""
    consume: Callable[[list], list] | None = None

    def __call__(self, inputs: Sequence[Any]) -> list:
        return self.fn(inputs)


@dataclass(frozen=True, slots=True)
class JointGraph:
    """Forward and backward in one graph.

    Inputs: the `num_primals` primals (kinds user/param/buffer/rng) then one `tangent` input per differentiable
    forward output. Outputs: the `num_forward_outputs` forward outputs (kinds user/mutation/alias, as in the
    graph it came from), then gradients: `Output(kind="grad", input=k)` for each primal k that gets one.
    Every node's `meta["region"]` is "forward" or "backward".
    """

    graph: Graph
    num_primals: int
    num_forward_outputs: int


@dataclass(frozen=True, slots=True)
class Partition:
    """A joint graph split in two.

    forward: inputs are the primals; outputs are the forward outputs, then the saved values (kind "saved").
    backward: inputs are the saved values (kind "saved") then the tangents; outputs are the grads (kind "grad",
    `input` = primal index). `saved` names the saved values in order; `report` is the partitioner's own account.
    """

    forward: Graph
    backward: Graph
    saved: tuple[str, ...]
    report: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Frontend(Protocol):
    def wrap(self, fn: Callable, compile_graph: CompileGraph, options: Mapping[str, Any]) -> Callable: ...


@runtime_checkable
class BackendFrontend(Frontend, Protocol):
    """A frontend that also serves as a plain Dynamo backend: `torch.compile(model, backend="ember")` calls the
    `backend(...)` of the frontend named `dynamo` with each GraphModule Dynamo captured."""

    def backend(self, compile_graph: CompileGraph, options: Mapping[str, Any]) -> Callable[[Any, list], Callable]: ...


@runtime_checkable
class GraphPass(Protocol):
    """A graph rewrite: `id` (kebab-case, the name it registers under), and `run(graph)`, which returns the graph
    itself when it changes nothing. It may say what it did in numbers, measured from its input and output:
    `summary(before, after) -> dict[str, int]` (optional; `pass_applied` events carry it)."""

    id: str

    def run(self, graph: Graph) -> Graph: ...


@runtime_checkable
class Autograd(Protocol):
    def joint(self, graph: Graph, example_inputs: Sequence[Any]) -> JointGraph: ...

    def wrap(self, partition: Partition, forward: CompiledGraph,
             compile_backward: Callable[[], CompiledGraph]) -> Callable[[Sequence[Any]], list]:
        """A callable like a codegen's: takes the original graph's inputs, returns its outputs (every kind),
        differentiable through an autograd.Function that runs `forward` and, on first backward, the result
        of `compile_backward()`."""
        ...


@runtime_checkable
class Partitioner(Protocol):
    def partition(self, joint: JointGraph, options: Mapping[str, Any]) -> Partition: ...


@runtime_checkable
class Codegen(Protocol):
    def compile(self, graph: Graph, example_inputs: Sequence[Any], options: Mapping[str, Any]) -> CompiledGraph: ...
