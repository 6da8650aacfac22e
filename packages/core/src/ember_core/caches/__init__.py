"""Disk caches: where they live and who may use them (a private, tagged root; trust checks on every file), entries
written atomically with signed sidecars, locks, pruning to a size limit, stage results keyed on the code that computed
them (`code_version`, `ResultCache`), and the report of what each cache holds (`ember cache`).

Builds on the graph IR, the events and the plugin manager (a cache emits events and reads options).
"""

from ._code_version import code_version
from ._directory import forget_opened, private_cache_dir
from ._disk_cache import CacheLookup, DiskCache, EntryFile
from ._result_cache import ResultCache, clear_result_caches, facts_key
from ._root import cache_root
from ._usage import CacheUsage, cache_size_limit, clear_disk_cache, disk_cache_usage

__all__ = [
    "forget_opened",
    "cache_root", "cache_size_limit", "CacheLookup", "CacheUsage", "clear_disk_cache", "clear_result_caches",
    "code_version", "disk_cache_usage", "DiskCache", "EntryFile", "facts_key", "private_cache_dir", "ResultCache",
]
