"""ember-runtime: `compile()` and the stage assembly behind it, found through the plugin manager."""

from ._compile import MODES, CompiledModule, compile, dynamo_backend
from ._events import record_events
from ._pipeline import Pipeline, clear_cache

__version__ = "0.1.0"

__all__ = ["MODES", "CompiledModule", "Pipeline", "__version__", "clear_cache", "compile", "dynamo_backend",
           "record_events"]
