"""Running one piece of work in several threads at once, for thread-safety tests."""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_threads(work: Callable[[int], object], n: int = 4, timeout: float = 300.0) -> None:
    """Run `work(k)` for k in range(n), each in its own thread, all released together by a barrier; re-raise the
    first error any thread raised, and fail if a thread is still running after `timeout` seconds."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def body(k: int) -> None:
        try:
            barrier.wait()
            work(k)
        except BaseException as e:  # handed to the caller's thread below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,), name=f"ember-test-{k}") for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if any(t.is_alive() for t in threads):
        raise AssertionError(f"a thread was still running after {timeout} s")
    if errors:
        raise errors[0]
