"""Stage assembly: options → frontend, graph passes, codegen per device; an in-memory cache of compiled graphs."""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import torch
from ember_core import CompiledGraph, Event, Graph, PluginError, PluginManager, fingerprint, get_plugin_manager

# fingerprint + codegen + options → compiled graph, shared by every compiled function in the process.
_cache: dict[tuple, CompiledGraph] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every compiled graph (tests, benchmarks of cold compiles)."""
    with _cache_lock:
        _cache.clear()


def graph_device(graph: Graph) -> str:
    """The device type the graph computes on: that of its first tensor input or constant, else cpu."""
    for inp in graph.inputs:
        v = graph.values[inp.name]
        if v.type == "tensor":
            return torch.device(v.device).type
    for c in graph.constants.values():
        return c.tensor.device.type
    return "cpu"


class Pipeline:
    """The stages chosen for one `ember.compile` call, found by name in the plugin registry."""

    def __init__(self, manager: PluginManager, options: dict[str, Any], frontend_options: dict[str, Any]):
        self.manager = manager
        self.options = options
        self.frontend_options = frontend_options
        self._options_key = repr(sorted((k, repr(v)) for k, v in options.items()))

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None, *, fullgraph: bool, dynamic: bool | None,
                     mode: str | None) -> Pipeline:
        manager = get_plugin_manager()
        checked = manager.registry.check_options(options)
        extra = {"fullgraph": fullgraph, "dynamic": dynamic, "mode": mode}
        return cls(manager, checked, {**checked, **extra})

    def frontend(self, name: str | None = None):
        return self.manager.registry.find("frontend", name or self.options["frontend"]).impl

    def passes(self, point: str) -> list:
        registry = self.manager.registry
        chosen = self.options.get("passes")
        if chosen is not None:
            impls = [registry.find("pass", name) for name in chosen]
        else:
            impls = [i for i in registry.all("pass") if i.default]
        return [i for i in impls if (i.point or "post_capture") == point]

    def codegen(self, device: str):
        name = self.options.get(f"codegen.{device}")
        return self.manager.registry.find("codegen", name, device=device)

    def run_passes(self, graph: Graph, point: str) -> Graph:
        for impl in self.passes(point):
            before = graph
            try:
                graph = impl.impl.run(graph)
            except Exception as e:
                raise PluginError(f"pass {impl.name!r} of plugin {impl.plugin!r} raised {type(e).__name__}: {e}") from e
            if graph is not before:
                self.manager.emit(Event("pass_applied", "passes", f"pass {impl.name} ({impl.plugin})", graph=graph))
        return graph

    def compile_graph(self, graph: Graph, example_inputs: Sequence[Any]) -> CompiledGraph:
        """What every frontend calls for each captured graph: passes, then the device's codegen, cached."""
        graph = self.run_passes(graph, "post_capture")
        codegen = self.codegen(graph_device(graph))
        key = (fingerprint(graph), codegen.name, self._options_key) if self.options["cache"] else None
        if key is not None:
            hit = _cache.get(key)
            if hit is not None:
                self.manager.emit(Event("cache_hit", "runtime", f"graph {graph.name!r}: reusing {codegen.name} build {key[0][:12]}"))
                return hit
        try:
            compiled = codegen.impl.compile(graph, example_inputs, self.options)
        except Exception as e:
            raise PluginError(f"codegen {codegen.name!r} of plugin {codegen.plugin!r} raised {type(e).__name__} "
                              f"compiling graph {graph.name!r}: {e}") from e
        self.manager.emit(Event("graph_compiled", "codegen", f"graph {graph.name!r} compiled by {codegen.name}",
                                graph=graph, source=compiled.source))
        if key is not None:
            with _cache_lock:
                _cache[key] = compiled
            self.manager.emit(Event("cache_miss", "runtime", f"graph {graph.name!r}: stored {codegen.name} build {key[0][:12]}"))
        return compiled
