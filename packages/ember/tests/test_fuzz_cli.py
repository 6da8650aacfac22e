"""Fuzzing the `ember` command on damaged files: `ember show FILE` on every kind of file it reads, and `ember report
DIR` on report pages, each mutated (`cli_cases.py`). Each run ends with exit code 0 (or `report`'s 1, no reports),
or 2 with a message whose first line is `ember COMMAND: error: ...`; never with a traceback, a control character
printed raw, a hang, or a payload run (the fuzz canary, or a marker file). The module prints its tally at the end.

The bulk of the cases runs `main()` in this process (milliseconds each); a few run `python -m ember` as a
subprocess with a timeout (a second or two each: `EMBER_FUZZ_CLI_EXAMPLES` sets how many, CI's default is 2), which
also sees what happens around `main()`: imports, argument parsing, the exit."""

from __future__ import annotations

import contextlib
import io
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_cases import clean_exit_problem, mutate, seeds, write_case
from ember._cli import main
from ember_core.testing import FuzzFailure, FuzzTally, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

SEEDS = seeds()
SUBPROCESS_TIMEOUT_S = 120
IN_PROCESS = FuzzTally("ember command, in process")
SUBPROCESS = FuzzTally("ember command, as a subprocess", time_bound_s=SUBPROCESS_TIMEOUT_S + 30)
FUZZ = fuzz_settings()
CLI_FUZZ = fuzz_settings(2, "EMBER_FUZZ_CLI_EXAMPLES")
case = st.tuples(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 4))


@pytest.fixture(scope="module", autouse=True)
def tally(request):
    yield
    IN_PROCESS.report(request.config)
    SUBPROCESS.report(request.config)


class Refused(Exception):
    """The command refused the file cleanly (exit 2, or `report`'s 1, with its one-line message)."""


def write(folder: Path, kind: str, seed: int, edits: int) -> tuple[list[str], Path]:
    """The command line of one case, its files written in `folder`; and the marker file a payload would leave."""
    rng = random.Random(seed)
    marker = folder / "marker"
    name, text = SEEDS[kind]
    path = write_case(folder, name, mutate(text, rng, marker, edits), rng)
    if kind != "report":
        return ["show", str(path)], marker
    for k in range(rng.randrange(3)):  # a few more pages, damaged or not
        write_case(folder, f"ember-report-{k + 2}.html", mutate(text, rng, marker, edits), rng)
    return ["report", str(folder)], marker


def judge(argv: list[str], marker: Path, rc: int, out: str, err: str) -> None:
    """Return for a clean run, raise `Refused` for a clean refusal, `FuzzFailure` for anything else."""
    if marker.exists():
        raise FuzzFailure("code run", f"a payload left the marker file: ember {' '.join(argv)}")
    refused = (1, 2) if argv[0] == "report" else (2,)
    problem = clean_exit_problem(argv[0], rc, out, err, (0,), refused)
    if problem is not None:
        kind = "wrongly accepted" if problem.startswith("printed") else "crash"
        raise FuzzFailure(kind, f"ember {' '.join(argv)}: {problem}")
    if rc in refused:
        raise Refused()


def in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def as_subprocess(argv: list[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run([sys.executable, "-m", "ember", *argv], capture_output=True, text=True,
                              errors="backslashreplace", timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FuzzFailure("hang", f"ember {' '.join(argv)} ran past {SUBPROCESS_TIMEOUT_S} s") from None
    return done.returncode, done.stdout, done.stderr


def run(tmp_path_factory, spec: tuple[str, int, int], command, tally: FuzzTally) -> None:
    folder = tmp_path_factory.mktemp("cli")
    argv, marker = write(folder, *spec)
    tally.run(lambda: judge(argv, marker, *command(argv)), refusals=(Refused,))
    shutil.rmtree(folder, ignore_errors=True)


@FUZZ
@given(case)
def test_the_command_in_process_ends_cleanly_on_damaged_files(tmp_path_factory, spec):
    run(tmp_path_factory, spec, in_process, IN_PROCESS)


@CLI_FUZZ
@given(case)
def test_the_command_as_a_subprocess_ends_cleanly_on_damaged_files(tmp_path_factory, spec):
    run(tmp_path_factory, spec, as_subprocess, SUBPROCESS)
