"""ember-runtime: `compile()` and the stage assembly behind it, found through the plugin manager."""

from ember_core import record_events  # re-exported: ember's users know it from here

from . import _compiled_autograd as compiled_autograd
from ._compile import MODES, CompiledModule, compile, dynamo_backend
from ._explain import CapturedGraph, EntryGuards, Explainer, ExplainOutput, Fallback, GraphBreak, Recompile, explain
from ._limits import Limits, machine_limits
from ._pipeline import Pipeline, clear_cache
from ._profile import GraphTiming, KernelTiming, Profiler, ProfileReport, profile

__version__ = "0.1.0"

__all__ = ["MODES", "CompiledModule", "Pipeline", "__version__", "clear_cache", "compile", "compiled_autograd",
           "dynamo_backend", "record_events",
           # ember.explain and its report
           "CapturedGraph", "EntryGuards", "ExplainOutput", "Explainer", "Fallback", "GraphBreak", "Recompile",
           "explain",
           # profiling
           "GraphTiming", "KernelTiming", "Limits", "ProfileReport", "Profiler", "machine_limits", "profile"]
