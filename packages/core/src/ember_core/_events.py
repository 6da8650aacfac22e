"""Events: what every stage reports to observers through the `ember_event` hook."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# kind → the EMBER_LOGS artifact that shows it. A kind outside this table is shown under its own name.
ARTIFACTS: dict[str, str] = {
    "graph_captured": "graphs",
    "graph_break": "graphs",
    "pass_applied": "graphs",
    "graph_compiled": "graphs",
    "joint_traced": "joint",
    "partitioned": "partition",
    "kernels_generated": "kernels",
    "guards_built": "guards",
    "guard_failed": "recompiles",
    "recompiled": "recompiles",
    "fallback": "recompiles",
    "cache_hit": "cache",
    "cache_miss": "cache",
    "cache_rebuilt": "cache",
}


@dataclass(frozen=True, slots=True)
class Event:
    """One stage's result. `message` is a line for people; `graph` and `source` carry what a dump writes."""

    kind: str
    stage: str
    message: str = ""
    graph: Any = None  # an ember_core.Graph, when the event is about one
    source: str | None = None  # generated code, guards text ...
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def artifact(self) -> str:
        return ARTIFACTS.get(self.kind, self.kind)
