"""The progress line of kernel builds: `ember: building 3 C++ libraries (2 done)…` on stderr while builds run.

Every build a `BuildPool` starts (C++ libraries, Triton modules, a third party's) is counted here, so one line
covers all of them. A batch opens with the first build started while none runs and closes, clearing the line,
when the last one ends. Cache hits start no build and show nothing. Drawn with `rich` on stderr:

- `EMBER_PROGRESS` unset, empty or `auto`: shown when stderr is a terminal;
- `EMBER_PROGRESS=1` (`on`, `true`, `yes`): shown even when it is not (a log file gets the terminal codes);
- `EMBER_PROGRESS=0` (`off`, `false`, `no`): never shown.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import Any

log = logging.getLogger("ember")

SETTING = "EMBER_PROGRESS"
_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")
_warned: set[str] = set()


def progress_setting() -> str:
    """`auto`, `on` or `off` from EMBER_PROGRESS; an unknown value is warned about once and taken as `auto`."""
    value = os.environ.get(SETTING, "").strip().lower()
    if value in _ON:
        return "on"
    if value in _OFF:
        return "off"
    if value not in ("", "auto") and value not in _warned:
        _warned.add(value)
        log.warning("%s=%r is not a setting: use 0, 1, auto (or off, on); showing progress on a terminal only",
                    SETTING, os.environ.get(SETTING))
    return "auto"


def noun_count(n: int, noun: str) -> str:
    """`1 C++ library`, `3 C++ libraries`, `2 Triton modules`."""
    if n == 1:
        return f"{n} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{n} {noun[:-1]}ies"
    return f"{n} {noun}s"


class BuildProgress:
    """Counts of the running batch of builds per kind of thing built, and the line that shows them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._counts: dict[str, list[int]] = {}  # what → [started, done, failed] in this batch
        self._live: Any = None  # rich.live.Live while a batch is shown
        self._spinner: Any = None
        self._fancy = True  # the stream takes UTF-8: a braille spinner and "…"
        self.stream: Any = None  # where the line goes; None: sys.stderr as a batch starts

    @property
    def active(self) -> bool:
        """A batch of builds is running."""
        with self._lock:
            return bool(self._counts)

    def started(self, what: str) -> None:
        """One build of a `what` (`C++ library`) has been started."""
        with self._lock:
            if not self._counts:
                self._open()
            self._counts.setdefault(what, [0, 0, 0])[0] += 1
            self._update()

    def finished(self, what: str, failed: bool = False) -> None:
        """A build started with `started(what)` has ended, built or `failed`."""
        with self._lock:
            counts = self._counts.get(what)
            if counts is None:
                return
            counts[1] += 1
            counts[2] += failed
            if all(c[1] >= c[0] for c in self._counts.values()):
                self._counts.clear()
                self._close()
                self._idle.notify_all()
            else:
                self._update()

    def text(self) -> str:
        """The line as it reads now, `ember: building 3 C++ libraries (2 done)…` ("" between batches)."""
        with self._lock:
            return self._text()

    def refresh(self) -> None:
        """Draw the line now rather than at the next tick."""
        with self._lock:
            if self._live is not None:
                self._live.refresh()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no build runs (True), or `timeout` seconds (False)."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._counts, timeout)

    def close(self) -> None:
        """Take the line off the screen whatever still runs (at exit)."""
        with self._lock:
            self._close()

    def _text(self) -> str:
        parts = []
        for what, (started, done, failed) in self._counts.items():
            status = [f"{done} done"] if done else []
            status += [f"{failed} failed"] if failed else []
            parts.append(noun_count(started, what) + (f" ({', '.join(status)})" if status else ""))
        if not parts:
            return ""
        return f"ember: building {', '.join(parts)}" + ("…" if self._fancy else "...")

    def _open(self) -> None:
        setting = progress_setting()
        stream = sys.stderr if self.stream is None else self.stream
        if setting == "off" or stream is None or setting == "auto" and not _isatty(stream):
            return
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        console = Console(file=stream, force_terminal=True if setting == "on" else None)
        self._fancy = (console.encoding or "").lower().replace("-", "").startswith("utf8")
        self._spinner = Spinner("dots" if self._fancy else "line", style="cyan")
        self._live = Live(self._spinner, console=console, transient=True, refresh_per_second=8,
                          redirect_stdout=False, redirect_stderr=False)
        try:
            self._live.start()
        except Exception as e:  # a progress line is never worth a failed compile
            log.debug("ember: no progress line: %s", e)
            self._live = None

    def _update(self) -> None:
        if self._live is None:
            return
        from rich.text import Text

        self._spinner.update(text=Text(self._text(), no_wrap=True, overflow="ellipsis"))
        self._live.refresh()

    def _close(self) -> None:
        live, self._live, self._spinner = self._live, None, None
        if live is not None:
            try:
                live.stop()
            except Exception as e:
                log.debug("ember: the progress line did not close: %s", e)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


PROGRESS = BuildProgress()
atexit.register(PROGRESS.close)
