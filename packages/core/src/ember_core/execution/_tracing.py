"""One process-wide lock for tracing.

make_fx, fake tensor modes and the patches that tracing installs live in process-global torch state (the active
patcher, the proxy mode's tensor tracker), so two threads that trace at once corrupt each other's trace. Every
stage that traces takes `tracing_lock()` around it. It is re-entrant: a frontend that holds it while it traces may
call a stage that takes it again (the runtime tracing the joint graph inside a frontend's compile).
"""

from __future__ import annotations

import threading

_LOCK = threading.RLock()


def tracing_lock() -> threading.RLock:
    """The lock every trace holds (make_fx and anything else that installs process-wide tracing state)."""
    return _LOCK
