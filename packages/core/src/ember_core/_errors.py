"""The errors ember-core raises. Each names what is wrong and where."""

from __future__ import annotations


class EmberError(Exception):
    """Base of every error ember raises on purpose."""


class SchemaError(EmberError):
    """A graph file or JSON document does not follow the schema. `where` is a path like `nodes[3].args[1]`."""

    def __init__(self, where: str, what: str):
        self.where, self.what = where, what
        super().__init__(f"{where}: {what}" if where else what)


class GraphError(EmberError):
    """A graph breaks a rule (undefined value, unknown op ...). The message shows the node in context."""


class SpecializationNeeded(GraphError):
    """A stage could trace a graph only at the values some of its symbols had when traced: a backward formula
    read a symbolic size as a plain int (`cumprod`'s backward asks whether the dim has one element) or equated two
    symbols, and the trace came out with that value in it. `values`: each such symbol's name and the value traced.
    The runtime then compiles the graph once per value of those symbols, each with them substituted
    (`specialize_symbols`), and picks the build by the values of each call."""

    def __init__(self, message: str, values: dict[str, int]):
        super().__init__(message)
        self.values = dict(values)


class InputsConsumed(EmberError, RuntimeError):
    """A compiled graph called through its `consume` entry (`CompiledGraph.consume`) needed its inputs again, to
    run its fallback (a kernel's error flag, an extern's result in a layout it cannot use), after it had let them
    go. The caller, which can remake them (autograd runs the forward again), decides what to do."""


class OptionError(EmberError):
    """An option key is unknown or its value has the wrong type."""


class PluginError(EmberError):
    """A plugin failed: the message names the plugin, the hook and what it raised."""
