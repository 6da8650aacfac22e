"""`./dev`'s way of running nox: nox from TOOLS (./dev puts it in .tools/), and a run that skipped a session fails.

    python tools/nox_run.py TOOLS [NOX-ARGS]

nox counts a skipped session as a success: `nox -s tests` exits 0 when every session was skipped (a Python it could
not find, before `error_on_missing_interpreters`, or a `session.skip()`), which reads as green having run nothing.
This runs nox with a JSON report (`--report`, a temporary file unless one is given) and exits 1, naming each skipped
session and its reason, when the report has any. TOOLS goes on this process's sys.path only: the sessions' Pythons
never see it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def skipped_sessions(report: dict) -> list[str]:
    """`name (reason)` of every session a nox JSON report marks skipped."""
    return [f"{s.get('name', '?')} ({s.get('reason') or 'no reason given'})"
            for s in report.get("sessions", []) if s.get("result") == "skipped"]


def report_path(args: list[str]) -> str | None:
    """The `--report` file the arguments already name, if any."""
    for i, arg in enumerate(args):
        if arg == "--report" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--report="):
            return arg.split("=", 1)[1]
    return None


def run(tools: str, args: list[str]) -> int:
    sys.path.insert(0, tools)
    from nox.__main__ import main as nox_main

    given = report_path(args)
    fd, temp = tempfile.mkstemp(prefix="nox-report-", suffix=".json")
    os.close(fd)
    os.unlink(temp)  # nox writes it only when sessions ran (not for `-l`)
    path = Path(given or temp)
    sys.argv = ["nox", *args, *([] if given else ["--report", temp])]
    try:
        nox_main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    if path.exists():
        try:
            names = skipped_sessions(json.loads(path.read_text()))
        finally:
            if not given:
                path.unlink()
        if names:
            print(f"dev: nox skipped {len(names)} session(s), which fails the run: " + "; ".join(names),
                  file=sys.stderr)
            code = code or 1
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(run(sys.argv[1], sys.argv[2:]))
