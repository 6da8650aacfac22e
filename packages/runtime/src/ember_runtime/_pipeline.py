"""Stage assembly: options → frontend, graph passes, codegen per device; an in-memory cache of compiled graphs."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ember_core import (
    CompiledGraph,
    Event,
    Graph,
    GraphCompiled,
    GraphError,
    JointGraph,
    JointTraced,
    Partition,
    Partitioned,
    PluginError,
    PluginManager,
    SpecializationNeeded,
    Stopwatch,
    autocast_disabled,
    dumping_to,
    fingerprint,
    get_plugin_manager,
    graph_device,
    interpreter_codegen,
    run_graph_passes,
    warn_fallback,
    without_autocast,
)

from ._frozen_graph import FrozenGraph, freezing_wanted
from ._graph_cache import GraphCache
from ._partition_cache import PARTITIONS, encode_partition, partition_facts, read_partition
from ._specialized_graph import SpecializedGraph

log = logging.getLogger("ember.runtime")

# fingerprint + codegen + options → compiled graph, shared by every compiled function in the process.
_cache = GraphCache()


def clear_cache() -> None:
    """Forget every compiled graph (tests, benchmarks of cold compiles)."""
    _cache.clear()


def sign_bit_inputs(inputs: Sequence[Any]) -> list[int]:
    """Positions of the tensor inputs with their negative or conjugate bit set (`z.conj().imag`, `z.conj()`): views
    whose values ATen negates or conjugates as it reads them, and compiled kernels would read raw."""
    return [k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor) and (x.is_neg() or x.is_conj())]


class Pipeline:
    """The stages chosen for one `ember.compile` call, found by name in the plugin registry."""

    def __init__(self, manager: PluginManager, options: dict[str, Any], frontend_options: dict[str, Any]):
        self.manager = manager
        self.options = options
        self.frontend_options = frontend_options
        self._options_key = repr(sorted((k, repr(v)) for k, v in options.items()))

    def __deepcopy__(self, memo: dict) -> Pipeline:
        """Shared, not copied: `copy.deepcopy(ember.compile(module))` copies the module, as it does a
        `torch.compile`d one, and keeps its compiler (whose plugin manager holds Python modules)."""
        return self

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None, *, fullgraph: bool, dynamic: bool | None,
                     mode: str | None) -> Pipeline:
        manager = get_plugin_manager()
        checked = manager.registry.check_options(options, manager.config.get("options"))
        extra = {"fullgraph": fullgraph, "dynamic": dynamic, "mode": mode}
        return cls(manager, {**checked, "mode": mode}, {**checked, **extra})  # codegens see the mode

    def frontend(self, name: str | None = None):
        return self.manager.registry.find("frontend", name or self.options["frontend"]).impl

    def passes(self, point: str) -> list:
        """The graph passes at `point`: those the `passes` option names, else the defaults (the registry's)."""
        return self.manager.registry.passes(point, self.options.get("passes"))

    def codegen(self, device: str):
        name = self.options.get(f"codegen.{device}")
        return self.manager.registry.find("codegen", name, device=device)

    def run_passes(self, graph: Graph, point: str) -> Graph:
        return run_graph_passes(graph, point, impls=self.passes(point))

    @staticmethod
    def needs_grad(graph: Graph, example_inputs: Sequence[Any]) -> bool:
        """Grad mode is on and an input requires grad (by the graph's metadata or the example inputs)."""
        if not torch.is_grad_enabled():
            return False
        return any(graph.values[i.name].requires_grad for i in graph.inputs) or any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)

    def autograd(self):
        """The autograd implementation for training, or None: run the forward graph under eager autograd."""
        name = self.options.get("autograd")
        if name == "eager" or not (self.manager.registry.has("autograd") and self.manager.registry.has("partition")):
            return None
        return self.manager.registry.find("autograd", name)

    def compile_graph(self, graph: Graph, example_inputs: Sequence[Any]) -> Any:
        """What every frontend calls for each captured graph: passes, then (training) autograd and partition,
        then the device's codegen. Returns a callable from the graph's inputs (a list) to its outputs (a list).

        The graph holds autocast's casts (the frontend captured it under the caller's autocast): every stage runs
        with autocast off, and so does every call of a graph captured under it (see `ember_core.without_autocast`;
        the frontends guard on the autocast state)."""
        with autocast_disabled() as autocast_was_on, self.dumping():
            compiled = self._compile_graph(graph, example_inputs)
        return without_autocast(compiled) if autocast_was_on else compiled

    def dumping(self):
        """The block in which this compile's events are dumped to the `dump` option's folder (if it is set)."""
        return dumping_to(self.options.get("dump"))

    def _compile_graph(self, graph: Graph, example_inputs: Sequence[Any]) -> Any:
        graph = self.run_passes(graph, "post_capture")
        signed = sign_bit_inputs(example_inputs)
        if signed:  # the frontends guard on the bits (Dynamo: the dispatch keys), so such a build serves only them
            names = ", ".join(graph.inputs[k].name if k < len(graph.inputs) else str(k) for k in signed)
            return self.interpreted(graph, example_inputs, f"input {names}: a negated or conjugated view (a sign bit "
                                    "ATen applies as it reads, which compiled kernels would not)", "input")
        if not self.needs_grad(graph, example_inputs):
            if freezing_wanted(self.options.get("freezing"), graph, example_inputs):
                return FrozenGraph(self, graph, example_inputs)  # frozen and compiled on its first call
            return self.codegen_graph(graph, example_inputs)
        autograd = self.autograd()
        if autograd is None:
            return self.eager_autograd(graph, example_inputs)
        return self.train(autograd, self.run_passes(graph, "pre_autograd"), example_inputs)

    def train(self, autograd, graph: Graph, example_inputs: Sequence[Any]) -> Any:
        """`compile_training`, or a `SpecializedGraph` when the joint trace fixed some of the graph's symbols."""
        try:
            return self.compile_training(autograd, graph, example_inputs)
        except SpecializationNeeded as needed:
            log.info("runtime: %s", needed)
            try:
                return SpecializedGraph(self, autograd, graph, example_inputs, needed)
            except GraphError as e:  # no input carries a fixed symbol on its own
                self.manager.emit(Event("fallback", "autograd", f"graph {graph.name!r}: {e}; it runs under eager "
                                        "autograd", graph=graph, data={"reason": str(e), "cause": "autograd"}))
                return self.eager_autograd(graph, example_inputs)

    def eager_autograd(self, graph: Graph, example_inputs: Sequence[Any]) -> CompiledGraph:
        """A graph that needs grad under eager autograd (`autograd="eager"`, or no autograd plugin installed): its
        ATen calls must run where autograd records them, in the interpreter codegen (a codegen's kernels are not
        differentiable: their outputs would silently not require grad)."""
        log.info("runtime: graph %r needs grad under eager autograd: it runs in the interpreter codegen", graph.name)
        return self.interpreted(graph, example_inputs)

    def interpreted(self, graph: Graph, example_inputs: Sequence[Any], reason: str | None = None,
                    cause: str | None = None) -> CompiledGraph:
        """The graph's ATen calls run by the interpreter codegen (under autograd when its inputs need grad); with a
        `reason`, a `fallback` event of that `cause` (and its warning, for a warned cause)."""
        if reason is not None:
            message = f"graph {graph.name!r}: {reason}; it runs in the interpreter codegen"
            log.warning("runtime: %s", message)
            where = next((n.meta["source"] for n in graph.nodes if n.meta.get("source")), None)
            self.manager.emit(Event("fallback", "runtime", message, graph=graph,
                                    data={"reason": reason, "cause": cause, "where": where}))
            warn_fallback(f"ember: {message}", cause, where)
        with Stopwatch() as clock:
            compiled = interpreter_codegen().compile(graph, example_inputs, self.options)
        self.manager.emit(Event("graph_compiled", "codegen", f"graph {graph.name!r} compiled by interpreter",
                                graph=graph, source=compiled.source, data={"seconds": clock.seconds},
                                payload=GraphCompiled(compiled)))
        return compiled

    def compile_training(self, autograd, graph: Graph, example_inputs: Sequence[Any]) -> Any:
        """autograd → partition (or both from the disk cache) → codegen of each half; the backward is compiled on
        its first use."""
        partitioner = self.manager.registry.find("partition", self.options.get("partition"))
        facts = self._partition_facts(graph, example_inputs, [autograd, partitioner])
        part = PARTITIONS.load(facts, graph, lambda text: read_partition(text, graph)) if facts else None
        if part is None:
            joint = self.trace_joint(autograd, graph, example_inputs)
            if joint is None:
                return self.eager_autograd(graph, example_inputs)
            part = self.partition(partitioner, graph, joint)
            text = encode_partition(part) if facts else None
            if text is not None:
                PARTITIONS.store(facts, graph, text)
        compiled_forward = self.codegen_graph(part.forward, example_inputs)
        backward = part.backward
        return autograd.impl.wrap(part, compiled_forward, lambda: self.codegen_graph(backward, None))

    def trace_joint(self, autograd, graph: Graph, example_inputs: Sequence[Any]) -> JointGraph | None:
        """The joint graph, or None (after a `fallback` event) when it cannot be traced faithfully: then the graph
        runs under eager autograd over its ATen calls."""
        try:
            with Stopwatch() as clock:
                joint = autograd.impl.joint(graph, example_inputs)
        except SpecializationNeeded:
            raise
        except GraphError as e:
            self.manager.emit(Event("fallback", "autograd", f"graph {graph.name!r}: {e}; it runs under eager autograd",
                                    graph=graph, data={"reason": str(e), "cause": "autograd"}))
            return None
        self.manager.emit(Event("joint_traced", "autograd", f"joint graph of {graph.name!r} by {autograd.name}",
                                graph=joint.graph, data={"seconds": clock.seconds},
                                payload=JointTraced(joint, graph, autograd.name)))
        return joint

    def partition(self, partitioner, graph: Graph, joint: JointGraph) -> Partition:
        """The joint graph split by `partitioner`; the post-partition passes run on each half."""
        with Stopwatch() as clock:  # the post-partition passes report their own seconds too
            part = partitioner.impl.partition(joint, self.options)
            forward = self.run_passes(part.forward, "post_partition")
            backward = self.run_passes(part.backward, "post_partition")
        part = part.__class__(forward, backward, part.saved, part.report, part.extra)
        summary = getattr(part.report, "summary", None)
        summary = summary() if callable(summary) else f"{len(part.saved)} saved values"
        self.manager.emit(Event("partitioned", "partition", f"{graph.name!r} split by {partitioner.name}: {summary}",
                                graph=forward, source=str(part.report) if part.report is not None else None,
                                data={"seconds": clock.seconds}, payload=Partitioned(joint, part, partitioner.name)))
        return part

    def _partition_facts(self, graph: Graph, example_inputs: Sequence[Any], stages: list) -> dict[str, str] | None:
        """The disk cache's facts of this graph's partition; None when the `cache` option is off or the example
        inputs cannot be described."""
        if not self.options["cache"]:
            return None
        return partition_facts(graph, example_inputs, self._options_key, [*stages, *self.passes("post_partition")])

    def codegen_graph(self, graph: Graph, example_inputs: Sequence[Any] | None, *, cache: bool = True
                      ) -> CompiledGraph:
        """The device's codegen for one graph, through the in-memory cache (unless `cache` is False)."""
        codegen = self.codegen(torch.device(graph_device(graph)).type)
        key = (fingerprint(graph), codegen.name, self._options_key) if self.options["cache"] and cache else None
        with self.dumping():  # also when a backward or a frozen graph compiles later, outside `compile_graph`
            return self._codegen_graph(codegen, key, graph, example_inputs)

    def _codegen_graph(self, codegen, key: tuple | None, graph: Graph, example_inputs: Sequence[Any] | None
                       ) -> CompiledGraph:
        hit = _cache.get(key) if key is not None else None
        if hit is not None:
            self._cache_event("graph_cache_hit", f"reusing its {codegen.name} build in memory", graph, key)
            return hit
        try:
            with Stopwatch() as clock:  # lowering and printing; a build the codegen leaves running reports its own
                compiled = codegen.impl.compile(graph, example_inputs, self.options)
        except Exception as e:
            raise PluginError(f"codegen {codegen.name!r} of plugin {codegen.plugin!r} raised {type(e).__name__} "
                              f"compiling graph {graph.name!r}: {e}") from e
        self.manager.emit(Event("graph_compiled", "codegen", f"graph {graph.name!r} compiled by {codegen.name}",
                                graph=graph, source=compiled.source, data={"seconds": clock.seconds},
                                payload=GraphCompiled(compiled)))
        if key is not None:
            _cache.put(key, compiled)
            self._cache_event("graph_cache_miss", f"{codegen.name} build kept in memory", graph, key)
        return compiled

    def _cache_event(self, kind: str, what: str, graph: Graph, key: tuple[str, str, str]) -> None:
        facts = {"graph": graph.name, "codegen": key[1], "fingerprint": key[0]}
        self.manager.emit(Event(kind, "runtime", f"graph {graph.name!r}: {what} {key[0][:12]}", data=facts))
