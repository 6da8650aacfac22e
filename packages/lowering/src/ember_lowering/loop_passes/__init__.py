"""Loop-IR passes, one per file; each class's `id` matches its file name (fuse_inline.py → fuse-inline). They take a
`KernelPlan` and give one (`run(plan, note)`), run by the scheduler in `default_passes()` order as a codegen's
`Capabilities` select them (`select_passes`); `decompose_ops` runs per kernel at print time. The graph passes, which
take and give ATen graphs, are in `graph_passes/`."""
