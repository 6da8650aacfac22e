"""`EMBER_REPORT=dir`: one HTML page per process in `dir`, kept current as compiles happen.

The page is written again (to a temporary file, then renamed over the old one, so a reader never sees half a page)
after each event that finishes something a reader waits for: a graph compiled, a build done, a fallback, a graph
break, a guard failure or recompile. A compile's HTML is kept between writes, so a write costs about the size of
the page. Other events are shown at the next such write, or at exit. Writing as compiles happen, not only at exit,
means a process that is killed, hangs or runs for hours still leaves a page that shows what it compiled so far.
"""

from __future__ import annotations

import atexit
import datetime
import html
import logging
import os
import platform
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .._regular_file import FileRefused, read_at_most, regular_file
from ..events._events import Event
from ..plugins.hookspecs import hookimpl
from ._model import Report
from ._page import GENERATOR, PageInfo, PageRenderer

log = logging.getLogger("ember")

WRITE_ON = {"graph_compiled", "kernels_built", "fallback", "graph_break", "guard_failed", "recompiled",
            "backward_captured"}
FILE_PATTERN = "ember-report-*.html"
_TITLE = re.compile(r"<title>(.*?)</title>", re.S)


class ReportWriter:
    """An `ember_event` observer that keeps a report page in `folder` (None: off, every event is ignored)."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self._lock = threading.RLock()
        self.folder: Path | None = None
        self._exit_hook = False
        self._dirty = False
        self.configure(folder)

    def configure(self, folder: str | Path | None) -> None:
        """Start a new page in `folder` (the one being kept is written first)."""
        with self._lock:
            if self.folder is not None and self._dirty:
                self.write()
            self.folder = Path(folder) if folder else None
            self._start()

    def _start(self) -> None:
        self.report = Report()
        self.renderer = PageRenderer()
        self._pid = os.getpid()
        self._dirty = False
        self._warned = False
        stamp = datetime.datetime.fromtimestamp(self.report.started).strftime("%Y%m%d-%H%M%S")
        self.path = self.folder / f"ember-report-{stamp}-{self._pid}.html" if self.folder is not None else None

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    @hookimpl
    def ember_event(self, event: Event) -> None:
        if self.folder is None:
            return
        with self._lock:
            if os.getpid() != self._pid:  # a forked child keeps its own page
                self._start()
            self._hook_exit()
            self.report.add(event)
            self._dirty = True
            if event.kind in WRITE_ON:
                self.write()

    def write(self) -> Path | None:
        """Render the page and replace the file; None (after one warning) when it cannot be written."""
        with self._lock:
            if self.path is None:
                return None
            html = self.renderer.render(self.report, _page_info(self.report.started))
            temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                temp.write_text(html, encoding="utf-8")
                os.replace(temp, self.path)
            except OSError as e:
                self._failed(e)
                return None
            self._dirty = False
            return self.path

    def _hook_exit(self) -> None:
        if not self._exit_hook:
            self._exit_hook = True
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        if self.folder is not None and self._dirty and os.getpid() == self._pid:
            self.write()

    def _failed(self, error: OSError) -> None:
        """A report is a debugging aid: one that cannot be written is reported once and never stops a compile."""
        if not self._warned:
            self._warned = True
            log.warning("EMBER_REPORT: cannot write the report %s (%s); compiling goes on without it", self.path,
                        error)


def _page_info(started: float) -> PageInfo:
    import torch  # noqa: PLC0415 - loaded already by whoever compiles

    from .. import __version__

    program = " ".join(sys.argv) if sys.argv and sys.argv[0] else "python"
    versions = f"ember-core {__version__}, torch {torch.__version__}, Python {platform.python_version()}"
    return PageInfo(program[:300], os.getpid(), started, versions)


# ---------------------------------------------------------------------------------------------- finding pages


@dataclass(frozen=True, slots=True)
class ReportFile:
    """A report page found in a folder: its path, when it was last written, its size and its title."""

    path: Path
    modified: float
    size: int
    title: str


def list_reports(folder: str | Path) -> list[ReportFile]:
    """The report pages in `folder`, newest first (a missing folder has none). Only regular files are read, and
    links are not followed: a fifo of a report's name would block the read, a device never end it."""
    found = []
    for path in Path(folder).glob(FILE_PATTERN):
        try:
            with regular_file(path, follow_links=False) as (fd, stat):
                head = read_at_most(fd, 4096).decode("utf-8", "replace")
        except FileRefused:
            continue
        if GENERATOR not in head:
            continue
        title = _TITLE.search(head)
        found.append(ReportFile(path, stat.st_mtime, stat.st_size, _unescape(title.group(1)) if title else ""))
    return sorted(found, key=lambda r: (r.modified, r.path.name), reverse=True)


def _unescape(text: str) -> str:
    return html.unescape(text).strip()


def age(seconds_ago: float) -> str:
    """`3 s ago`, `5 min ago`, `2 h ago`, `4 days ago`."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds_ago >= size:
            return f"{int(seconds_ago // size)} {unit} ago"
    return f"{int(seconds_ago)} s ago"
