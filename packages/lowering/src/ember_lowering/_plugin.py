"""ember-lowering's plugin, found by entry point like any other: its graph passes, `channels-last` after capture
(CUDA and CPU graphs) and the others at `pre_lowering`, in order."""

from __future__ import annotations

from ember_core import hookimpl

from .graph_passes import CatMatmulSums, CatSliceScatters, ChannelsLast, DropDeadClones, FoldScatterAdds, IndexAddRows


@hookimpl
def ember_register(registry) -> None:
    # in this order (priority): fold-scatter-adds, index-add-rows (CPU graphs), cat-slice-scatters, cat-matmul-sums,
    # then drop-dead-clones
    registry.add("pass", FoldScatterAdds.id, FoldScatterAdds(), point="pre_lowering", priority=20)
    registry.add("pass", IndexAddRows.id, IndexAddRows(), point="pre_lowering", priority=18)
    registry.add("pass", CatSliceScatters.id, CatSliceScatters(), point="pre_lowering", priority=15)
    registry.add("pass", CatMatmulSums.id, CatMatmulSums(), point="pre_lowering", priority=12)
    registry.add("pass", DropDeadClones.id, DropDeadClones(), point="pre_lowering", priority=10)
    registry.add("pass", ChannelsLast.id, ChannelsLast(), point="post_capture", devices=("cuda", "cpu"))
