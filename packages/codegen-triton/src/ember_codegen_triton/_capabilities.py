"""What the Triton codegen's kernels can do (ember-lowering's `Capabilities`), in a module that imports no Triton:
the registry's stand-in (`LazyTritonCodegen`) answers with it before Triton loads (`ember plugins --passes`)."""

from __future__ import annotations

from ember_lowering import Capabilities, SplitPolicy

TRITON_CAPABILITIES = Capabilities(
    # a persistent kernel holds its row in registers: what a later loop reads again is computed again there,
    # so no stash-values (and no `local` rows)
    stashes=False,
    # a row that fits a block computes its moments in two passes over registers already (`_reductions.py`);
    # a longer one loops, and a second pass would read it from memory again: no split-moments
    row_moments=True,
    # a program takes a few rows of a reduction: one with few results and long rows runs split in two, so that
    # every multiprocessor has rows (batch norm's statistics in training: 64 channels, 400k elements each)
    split_reductions=SplitPolicy(),
    cuda_graphs=True,
    # max-autotune's matmul templates compute a GEMM's product inside its epilogue kernel, where the product never
    # exists as the ATen call's result (whose storage plan-buffers would otherwise lend; on a GPU the caching
    # allocator hands freed blocks back without faulting them in, so that lending matters little there)
    gemm_epilogues=True,
)
