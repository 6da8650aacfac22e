"""ember-capture: frontends that turn Python functions into guarded calls of functional ATen graphs."""

from ._aten import capture_graph
from ._dynamo import DynamoBackend, DynamoFrontend
from ._dynamo_fixes import prepare_dynamo
from ._errors import CaptureError
from ._runner import GraphRunner
from ._trace import Entry, TracedFunction, TraceFrontend

__version__ = "0.1.0"

__all__ = [
    "CaptureError", "DynamoBackend", "DynamoFrontend", "Entry", "GraphRunner", "TraceFrontend",
    "TracedFunction", "__version__", "capture_graph", "prepare_dynamo",
]
