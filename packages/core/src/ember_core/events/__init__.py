"""Events and logs: the event stream every stage emits (`Event`, `EVENT_KINDS`, their payloads), the logger and dump
writer that observe it, and the warnings a user gets for fallbacks.

Builds on the graph IR (a dump writes graphs); the stage objects that events carry are annotations only.
"""

from ._dump import DumpWriter, dumping_to
from ._events import (
    EVENT_KINDS,
    FALLBACK_CAUSES,
    Event,
    EventKind,
    GraphCompiled,
    JointTraced,
    Partitioned,
    Reused,
    Stopwatch,
    break_site,
)
from ._fallback_warning import WARNED_CAUSES, FallbackWarning, warn_fallback

__all__ = [
    "break_site",
    "DumpWriter", "dumping_to", "Event", "EVENT_KINDS", "EventKind", "FALLBACK_CAUSES", "FallbackWarning",
    "GraphCompiled", "JointTraced", "Partitioned", "Reused", "Stopwatch", "warn_fallback", "WARNED_CAUSES",
]
