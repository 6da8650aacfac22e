"""Readable logs, built only on events: `EMBER_LOGS=graphs,guards,...` (dumps: `_dump.DumpWriter`)."""

from __future__ import annotations

import logging

from ._events import ARTIFACTS, Event

LOG_ARTIFACTS = tuple(sorted(set(ARTIFACTS.values())))
log = logging.getLogger("ember")


class EventLogger:
    """Prints events of the chosen artifacts to the `ember` logger."""

    def __init__(self) -> None:
        self.artifacts: set[str] = set()
        self._last_graph: str | None = None

    def configure(self, logs: str) -> None:
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

    def __call__(self, event: Event) -> None:
        if event.artifact in self.artifacts:
            text = event.message
            if event.graph is not None and event.artifact in ("graphs", "joint", "partition", "kernels"):
                text += self._graph_text(event.graph)
            if event.source and event.artifact in ("guards", "kernels", "partition"):
                text += "\n" + event.source
            log.getChild(event.artifact).info(text)

    def _graph_text(self, graph) -> str:
        """The graph's text, or a pointer to where it was printed when the last graph logged was the same one
        (capture and codegen both report a graph that no pass changed)."""
        text = str(graph)
        if text == self._last_graph:
            return f" (graph {graph.name!r} as printed above)"
        self._last_graph = text
        return "\n" + text
