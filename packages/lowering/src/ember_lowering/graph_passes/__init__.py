"""ember-lowering's graph passes, one per file, each class's `id` matching its file name: they run at the
`pre_lowering` point on the ATen graph a codegen lowers (registered by `_plugin.py`, run by `lower_graph`). The
loop-IR passes are in `loop_passes/`."""

from .drop_dead_clones import DropDeadClones
from .fold_scatter_adds import FoldScatterAdds

__all__ = ["DropDeadClones", "FoldScatterAdds"]
