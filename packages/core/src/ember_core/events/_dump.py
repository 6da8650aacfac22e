"""The dump writer: every file `EMBER_DUMP=dir` asks for, from ember or from a plugin, in one folder, numbered.

Each event that writes anything gets the next number once; every file written for it, by any observer, is named
`NNN-<kind>-<name><suffix>` with that number (`003-partitioned-f_fw.txt`, `003-partitioned-f_fw.dot`). A folder
that cannot be written is reported once, as a warning, and never fails a compile.

The folder is `EMBER_DUMP`'s, the process's; a compile given the option `dump` writes its events to that folder
instead: the runtime runs its stages inside `dumping_to(folder)`, and the manager hands observers the writer of the
innermost such block (`dump_override`), one writer per folder, so each folder is numbered on its own.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path

from ..graph import save
from ._events import Event

log = logging.getLogger("ember")

_SUFFIX = re.compile(r"[A-Za-z0-9_.-]+")
_RECENT = 64  # events whose number is remembered (observers of one event run before the next is sent)


class DumpWriter:
    """Writes the files of events to `folder` (None: dumps are off and every write does nothing)."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder else None
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._stems: OrderedDict[int, tuple[Event, str]] = OrderedDict()  # id(event) → (event kept alive, stem)
        self._warned = False

    @property
    def enabled(self) -> bool:
        """True when a dump folder is set: check it before rendering an expensive artifact."""
        return self.folder is not None

    def write(self, event: Event, suffix: str, content: str | bytes) -> Path | None:
        """Write `content` to `<folder>/NNN-<kind>-<name><suffix>`, NNN being the event's number. Returns the path,
        or None when dumps are off or the folder cannot be written (warned once). `suffix` is a file ending such as
        `.dot` or `.plan.txt`: letters, digits, `_`, `-` and `.` only."""
        if not _SUFFIX.fullmatch(suffix):
            raise ValueError(f"dump suffix {suffix!r} must be letters, digits, '_', '-' and '.' only, like '.dot'")
        if self.folder is None:
            return None
        path = self.folder / (self.stem(event) + suffix)
        if isinstance(content, bytes):
            return self._attempt(path, lambda: path.write_bytes(content))
        return self._attempt(path, lambda: path.write_text(content))

    def write_event(self, event: Event) -> list[Path]:
        """ember's own files of an event: its graph as text (`.txt`) and JSON (`.json`), its source (`.src.txt`)."""
        if self.folder is None or (event.graph is None and not event.source):
            return []
        written = []
        if event.graph is not None:
            written.append(self.write(event, ".txt", str(event.graph) + "\n"))
            written.append(self._save_json(event))
        if event.source:
            written.append(self.write(event, ".src.txt", event.source + "\n"))
        return [p for p in written if p is not None]

    def stem(self, event: Event) -> str:
        """`NNN-<kind>-<name>` of the event: numbered on first use, the same for every later file of it."""
        with self._lock:
            known = self._stems.get(id(event))
            if known is not None and known[0] is event:
                return known[1]
            name = getattr(event.graph, "name", "") or event.stage
            stem = f"{next(self._counter):03d}-{event.kind}-{_safe(name)}"  # names may hold dots: no with_suffix
            self._stems[id(event)] = (event, stem)
            while len(self._stems) > _RECENT:
                self._stems.popitem(last=False)
            return stem

    def _save_json(self, event: Event) -> Path | None:
        path = self.folder / (self.stem(event) + ".json")
        return self._attempt(path, lambda: save(event.graph, path))

    def _attempt(self, path: Path, write: Callable[[], object]) -> Path | None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write()
        except OSError as e:
            self._failed(e)
            return None
        return path

    def _failed(self, error: OSError) -> None:
        """A dump is a debugging aid: one that cannot be written is reported once and never stops a compile."""
        with self._lock:
            if self._warned:
                return
            self._warned = True
        log.warning("EMBER_DUMP: cannot write dumps to %s (%s); compiling goes on without them", self.folder, error)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


_override: ContextVar[DumpWriter | None] = ContextVar("ember_dump_override", default=None)
_writers: dict[str, DumpWriter] = {}
_writers_lock = threading.Lock()


@contextlib.contextmanager
def dumping_to(folder: str | Path | None) -> Iterator[None]:
    """Events sent in this block (in this thread or task) are dumped to `folder` rather than EMBER_DUMP's
    (None: no change)."""
    if not folder:
        yield
        return
    key = str(Path(folder))
    with _writers_lock:
        writer = _writers.get(key)
        if writer is None:
            writer = _writers[key] = DumpWriter(key)
    token = _override.set(writer)
    try:
        yield
    finally:
        _override.reset(token)


def dump_override() -> DumpWriter | None:
    """The writer of the innermost `dumping_to` block around the caller, if any."""
    return _override.get()

