"""ember-autograd: AOT autograd. `joint` traces an ATen graph's forward and backward as one graph; `wrap` runs the
compiled halves of its partition as an autograd.Function."""

from ._grad_boundaries import insert_grad_boundaries
from ._joint import joint
from ._plugin import AOTAutograd
from ._wrapper import CompiledFunction, wrap

__version__ = "0.1.0"

__all__ = [
    "AOTAutograd", "CompiledFunction", "__version__", "insert_grad_boundaries",
    "joint", "wrap",
]
