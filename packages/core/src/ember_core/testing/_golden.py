"""Golden text snapshots: `assert_golden(actual, path)` compares with a file; `EMBER_ACCEPT=1` rewrites it."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

ACCEPT_ENV = "EMBER_ACCEPT"


def accepting() -> bool:
    """True when the run was asked to rewrite snapshots (`EMBER_ACCEPT=1 pytest ...`)."""
    return os.environ.get(ACCEPT_ENV) == "1"


def assert_golden(actual: str, path: str | os.PathLike) -> None:
    """Fail with a diff when `actual` differs from the snapshot at `path`; with EMBER_ACCEPT=1, write it instead.
    Review the rewritten snapshot's diff like code."""
    path = Path(path)
    text = actual if actual.endswith("\n") else actual + "\n"
    if accepting():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return
    if not path.exists():
        raise AssertionError(f"no snapshot {path}; run the test with {ACCEPT_ENV}=1 to write it, then review it")
    expected = path.read_text()
    if expected != text:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "snapshot", "actual"))
        raise AssertionError(f"output differs from snapshot {path}:\n{diff}\n"
                             f"If the change is intended, rerun with {ACCEPT_ENV}=1 and review the snapshot's diff.")
