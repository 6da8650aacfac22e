"""ember-lowering's graph passes, one per file, each class's `id` matching its file name (registered by
`_plugin.py`): `channels-last` after capture, on the graphs of every codegen (`_conv_layouts.py` decides it); the
others at the `pre_lowering` point on the ATen graph a codegen lowers (run by `lower_graph`). The loop-IR passes are
in `loop_passes/`."""

from .cat_matmul_sums import CatMatmulSums
from .cat_slice_scatters import CatSliceScatters
from .channels_last import ChannelsLast
from .drop_dead_clones import DropDeadClones
from .fold_scatter_adds import FoldScatterAdds
from .index_add_rows import IndexAddRows

__all__ = ["CatMatmulSums", "CatSliceScatters", "ChannelsLast", "DropDeadClones", "FoldScatterAdds", "IndexAddRows"]
