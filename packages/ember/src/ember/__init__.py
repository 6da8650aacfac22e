"""ember: a PyTorch 2 compiler you can see inside. `ember.compile(model)` is torch.compile with ember's stages."""

from importlib.metadata import PackageNotFoundError, version

from ember_core import EmberError, FallbackWarning, Graph, load, save
from ember_runtime import ExplainOutput, compile, compiled_autograd, explain, profile, record_events

from . import cache

try:
    __version__ = version("ember")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["EmberError", "Graph", "__version__", "compile", "compiled_autograd", "load", "record_events", "save"]
__all__ += ["ExplainOutput", "FallbackWarning", "cache", "explain", "profile"]
