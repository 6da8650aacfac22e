"""Scheduler passes, one per file; each class's `id` matches its file name (fuse_inline.py → fuse-inline)."""
