"""Readable logs and dumps, built only on events: `EMBER_LOGS=graphs,guards,...` and `EMBER_DUMP=dir`."""

from __future__ import annotations

import itertools
import logging
import re
from pathlib import Path

from ._events import ARTIFACTS, Event

LOG_ARTIFACTS = tuple(sorted(set(ARTIFACTS.values())))
log = logging.getLogger("ember")


class EventLogger:
    """Prints events of the chosen artifacts to the `ember` logger, and writes numbered files to a dump folder."""

    def __init__(self) -> None:
        self.artifacts: set[str] = set()
        self.dump_dir: Path | None = None
        self._counter = itertools.count()
        self._dump_warned = False
        self._last_graph: str | None = None

    def configure(self, logs: str, dump: str | None) -> None:
        names = {a.strip() for a in (logs or "").split(",") if a.strip()}
        if "all" in names:
            names = set(LOG_ARTIFACTS)
        unknown = names - set(LOG_ARTIFACTS)
        if unknown:
            log.warning("EMBER_LOGS: unknown artifact(s) %s; known: %s",
                        ", ".join(sorted(unknown)), ", ".join(LOG_ARTIFACTS))
        self.artifacts = names & set(LOG_ARTIFACTS)
        if self.artifacts:
            log.setLevel(logging.INFO)  # chosen artifacts show even when the application set up handlers itself
            if not log.handlers:
                handler = logging.StreamHandler()
                handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))  # [ember.graphs] ...
                log.addHandler(handler)
                log.propagate = False
        self.dump_dir = Path(dump) if dump else None
        self._dump_warned = False

    def __call__(self, event: Event) -> None:
        if event.artifact in self.artifacts:
            text = event.message
            if event.graph is not None and event.artifact in ("graphs", "joint", "partition", "kernels"):
                text += self._graph_text(event.graph)
            if event.source and event.artifact in ("guards", "kernels", "partition"):
                text += "\n" + event.source
            log.getChild(event.artifact).info(text)
        if self.dump_dir is not None:
            try:
                self.dump(event, self.dump_dir)
            except OSError as e:
                self._dump_failed(self.dump_dir, e)

    def _graph_text(self, graph) -> str:
        """The graph's text, or a pointer to where it was printed when the last graph logged was the same one
        (capture and codegen both report a graph that no pass changed)."""
        text = str(graph)
        if text == self._last_graph:
            return f" (graph {graph.name!r} as printed above)"
        self._last_graph = text
        return "\n" + text

    def _dump_failed(self, folder: Path, error: OSError) -> None:
        """A dump is a debugging aid: one that cannot be written is reported once and never stops a compile."""
        if not self._dump_warned:
            self._dump_warned = True
            log.warning("EMBER_DUMP: cannot write dumps to %s (%s); compiling goes on without them", folder, error)

    def dump(self, event: Event, folder: Path) -> None:
        """Write the event's graph (text and JSON) and source to numbered files in `folder`."""
        if event.graph is None and not event.source:
            return
        from ._json import save

        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", getattr(event.graph, "name", "") or event.stage)
        stem = f"{next(self._counter):03d}-{event.kind}-{name}"  # names may hold dots: no with_suffix
        if event.graph is not None:
            (folder / f"{stem}.txt").write_text(str(event.graph) + "\n")
            save(event.graph, folder / f"{stem}.json")
        if event.source:
            (folder / f"{stem}.src.txt").write_text(event.source + "\n")
