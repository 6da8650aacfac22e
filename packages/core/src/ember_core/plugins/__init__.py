"""Plugins and options: the hook specs (`hookspecs`, `hookimpl`), the stage contracts a plugin implements
(`Frontend`, `Autograd`, `Partitioner`, `Codegen`, `GraphPass`), the plugin manager and registry, options declared by
the package that reads them, graph passes run at the pipeline's named points, and `record_events`.

Builds on the graph IR and the events.
"""

from . import hookspecs
from ._graph_passes import run_graph_passes
from ._options import OptionSpec
from ._plugins import Implementation, PluginManager, PluginRegistry, emit, get_plugin_manager, reset_plugin_manager
from ._recording import record_events
from ._stages import (
    PASS_POINTS,
    Autograd,
    BackendFrontend,
    Codegen,
    CompiledGraph,
    Frontend,
    GraphPass,
    JointGraph,
    Partition,
    Partitioner,
)
from .hookspecs import hookimpl

__all__ = [
    "Autograd", "BackendFrontend", "Codegen", "CompiledGraph", "emit", "Frontend", "get_plugin_manager", "GraphPass",
    "hookimpl", "hookspecs", "Implementation", "JointGraph", "OptionSpec", "Partition", "Partitioner", "PASS_POINTS",
    "PluginManager", "PluginRegistry", "record_events", "reset_plugin_manager", "run_graph_passes",
]
