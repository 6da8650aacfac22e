"""Disk caches: where they live and who may use them (a private, tagged root; trust checks on every file), entries
written atomically with signed sidecars, locks, pruning to a size limit, stage results keyed on the code that computed
them (`code_version`, `ResultCache`), and the report of what each cache holds (`ember cache`). Entries travel too:
through a remote cache many machines share (`EMBER_REMOTE_CACHE`, Redis) and portable artifacts (`save_artifact`,
`load_artifact`), packed, verified and, where they hold code, signed with the team's key (`EMBER_CACHE_KEY`).

Builds on the graph IR, the events and the plugin manager (a cache emits events and reads options).
"""

from ._artifacts import ArtifactError, ArtifactReport, all_local_entries, load_artifact, save_artifact
from ._backends import BackendUnavailable, CacheBackend, LocalBackend
from ._code_version import code_version
from ._directory import forget_opened, private_cache_dir
from ._disk_cache import CacheLookup, DiskCache, EntryFile
from ._entry_files import write_atomic
from ._machine import cpu_lines, cpu_tag, machine_facts
from ._packed import PackedEntry
from ._registry import disk_caches, recording, used_entries
from ._remote import BlobStore, RemoteCache, forget_remote_caches, register_blob_store, remote_cache
from ._result_cache import ResultCache, clear_result_caches, facts_key
from ._root import cache_root
from ._sidecar import BadEntry
from ._team_key import TeamKey, TeamKeyError, team_key
from ._usage import CacheUsage, cache_size_limit, clear_disk_cache, disk_cache_usage

__all__ = [
    "forget_opened",
    "cache_root", "cache_size_limit", "CacheLookup", "CacheUsage", "clear_disk_cache", "clear_result_caches",
    "code_version", "disk_cache_usage", "DiskCache", "EntryFile", "facts_key", "private_cache_dir", "ResultCache",
    "BackendUnavailable", "BadEntry", "BlobStore", "CacheBackend", "LocalBackend", "PackedEntry", "RemoteCache",
    "cpu_lines", "cpu_tag", "disk_caches", "forget_remote_caches", "machine_facts", "register_blob_store",
    "remote_cache", "TeamKey", "TeamKeyError", "team_key", "used_entries",
    "all_local_entries", "ArtifactError", "ArtifactReport", "load_artifact", "recording", "save_artifact",
    "write_atomic",
]
