"""Freezing: an inference graph's parameters and buffers become constants, and the work on them is done once.

    result = freeze(graph, inputs)          # inputs: the call's real tensors, in the graph's input order
    result.graph                            # takes only the inputs `result.kept` names
    result.graph(...)  ==  graph(inputs)    # same outputs, given [inputs[k] for k in result.kept]

First `freeze_params` (`freeze_params.py`): parameter and buffer inputs the graph neither writes nor hands out become
constants holding the call's tensors (`detach()`: the same storage, no copy). Then the graph passes at the `freeze`
point (ember-core's `run_graph_passes`; this package's plugin registers these, in this order, and a plugin may add
its own), each a module of its own here (a class with an `id`, graph in, graph out; usable alone):
2. `fold-constants` (`fold_constants.py`): nodes that read only constants run once with eager ATen (a transposed
   weight, `weight * scale`, a dtype cast) and become constants.
3. `fold-batch-norm` (`fold_batch_norm.py`): eval-mode batch norm folded into the convolution or linear before it.
4. `prepack-weights` (`prepack_weights.py`, CPU with oneDNN): convolutions and linear layers call
   `mkldnn._convolution_pointwise` (weight pre-packed) / `mkldnn._linear_pointwise`, the activation after them fused;
   the nodes after a convolution take the layouts ATen gives from its channels-last result (`follow_layouts.py`).
5. `drop-dead` (`_edit.py`): dead nodes and constants are dropped at the end.

A frozen graph is only right while the frozen tensors keep their values: `FreezeResult.guard(inputs)` says whether
a call's tensors are still the frozen ones (same objects, same version counter, same storage) and, for buffers,
still hold the same values: a training-mode batch norm updates its running statistics in place without bumping
their version counter (eager's kernel and ember's compiled graphs alike), so buffers (up to `WATCHED_NUMEL`
elements in all, batch norm statistics and the like) are compared by value, a few microseconds a call.
ember-runtime checks it on every call and refreezes when it fails (`_frozen_graph.py`). This package depends on
ember-core and torch only.
"""

from ._edit import DropDead
from ._epilogues import epilogue_chains, epilogue_rules
from ._freeze import WATCHED_NUMEL, BufferWatch, FreezeResult, freeze
from .fold_batch_norm import FoldBatchNorm, fold_batch_norm
from .fold_constants import FoldConstants, fold_constants
from .follow_layouts import follow_layouts
from .freeze_params import freezable, freeze_params, frozen_candidates
from .prepack_weights import PrepackWeights, prepack_weights

__all__ = ["WATCHED_NUMEL", "BufferWatch", "DropDead", "FoldBatchNorm", "FoldConstants", "FreezeResult",
           "PrepackWeights", "epilogue_chains", "epilogue_rules", "fold_batch_norm", "fold_constants",
           "follow_layouts", "freezable", "freeze", "freeze_params", "frozen_candidates", "prepack_weights"]
