"""The user's source lines behind graph nodes: a node's `meta["source"]` is `file.py:12` (the file's base name), and
the report shows line 12 of that file when exactly one file of that name is known to this process: of the files
graphs were captured from (the fx bridge's `SOURCE_PATHS`), else of every known file (a loaded module, a file
`linecache` has read, the main script); a project's two `models.py` of which one was compiled are not ambiguous.
Best effort: anything else shows the location only."""

from __future__ import annotations

import linecache
import os
import sys

from ..graph import _fx_bridge

MAX_LINE = 240


class SourceLines:
    """`line("model.py:12")` → the text of that line, or None; the files are looked up once per name."""

    def __init__(self) -> None:
        self._files: dict[str, str | None] = {}

    def line(self, where: str) -> str | None:
        name, _, number = where.rpartition(":")
        if not name or not number.isdigit():
            return None
        path = self._file(name)
        if path is None:
            return None
        text = linecache.getline(path, int(number)).strip()
        return (text[:MAX_LINE] + "…" if len(text) > MAX_LINE else text) or None

    def _file(self, name: str) -> str | None:
        if name not in self._files:
            captured = _fx_bridge.SOURCE_PATHS.get(name, set())
            found = {os.path.realpath(p) for p in captured or _known_files()
                     if os.path.basename(p) == name and os.path.isfile(p)}
            self._files[name] = found.pop() if len(found) == 1 else None
        return self._files[name]


def _known_files() -> list[str]:
    files = [p for p in linecache.cache if isinstance(p, str) and not p.startswith("<")]
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            files.append(path)
    if sys.argv and sys.argv[0].endswith(".py"):
        files.append(os.path.abspath(sys.argv[0]))
    return files
