"""Which code of a package is running: its version plus a digest of its Python sources.

Disk caches of what a stage computed (a partition, a kernel plan) key on it, so that a result computed by other
code is never reused. A release changes the version; an edit while developing, with the version unchanged,
changes the digest. The digest is computed once per package and process (about a millisecond per 100 kB).
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_versions: dict[str, str] = {}


def code_version(what: str | ModuleType | Any) -> str:
    """`<version>+<digest>` of the top-level package that defines `what`: a module name, a module, or an object
    (a plugin's implementation: the package of its class). A package without source files gets its version
    alone."""
    package = _package_name(what)
    with _lock:
        found = _versions.get(package)
        if found is None:
            found = _versions[package] = _compute(package)
        return found


def _package_name(what: Any) -> str:
    if isinstance(what, str):
        name = what
    elif isinstance(what, ModuleType):
        name = what.__name__
    else:
        name = getattr(what, "__module__", None) or type(what).__module__
    return name.split(".")[0]


def _compute(package: str) -> str:
    module = sys.modules.get(package) or importlib.import_module(package)
    version = str(getattr(module, "__version__", "0"))
    file = getattr(module, "__file__", None)
    if not file:
        return version
    return f"{version}+{source_digest(Path(file).parent)}"


def source_digest(folder: Path) -> str:
    """sha256 (first 16 hex digits) over the relative path and bytes of every .py file under folder, in order."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
