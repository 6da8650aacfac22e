"""The expected-failures list: the sweep's cases that fail today, one per line, parsed strictly (never evaluated).

    # comment
    op-key                      dtype     phase     sample  class
    nn.functional.rrelu         float32   backward  0       random-mismatch

`op-key` is the OpInfo's name, `.variant` appended when it has one (`max.reduction_with_dim`). A run reports the
cases that fail without a line here (unexpected failures) and the lines whose case now passes (unexpected passes),
so the list can only shrink: delete a line when its case is fixed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from .cases import DTYPES, PHASES, CaseResult

PATH = Path(__file__).with_name("expected_failures.txt")
_CLASS = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_OP = re.compile(r"[A-Za-z0-9_.]{1,120}")

Key = tuple[str, str, str, int]  # op key, dtype, phase, sample


class ExpectedFileError(ValueError):
    """A line of the expected-failures file that does not parse; the message names the file and line."""


def case_key(result: CaseResult) -> Key:
    op = f"{result.op}.{result.variant}" if result.variant else result.op
    return (op, result.dtype, result.phase, result.sample)


def parse(text: str, source: str = "expected_failures.txt") -> dict[Key, str]:
    """Each case's expected failure class. Raises ExpectedFileError on any line that is not exactly five good fields
    or that repeats a case."""
    entries: dict[Key, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, klass = _parse_line(line, f"{source}:{number}")
        if key in entries:
            raise ExpectedFileError(f"{source}:{number}: the case is listed twice: {line!r}")
        entries[key] = klass
    return entries


def _parse_line(line: str, where: str) -> tuple[Key, str]:
    fields = line.split()
    problem = None
    if len(fields) != 5:
        problem = f"expected 5 fields (op dtype phase sample class), got {len(fields)}"
    else:
        op, dtype, phase, sample, klass = fields
        if not _OP.fullmatch(op):
            problem = "op key has characters outside [A-Za-z0-9_.]"
        elif dtype not in DTYPES:
            problem = f"dtype is one of {', '.join(DTYPES)}"
        elif phase not in PHASES:
            problem = f"phase is one of {', '.join(PHASES)}"
        elif not sample.isdigit() or len(sample) > 3:
            problem = "sample is a small non-negative integer"
        elif not _CLASS.fullmatch(klass):
            problem = "class is lower-case letters, digits and '-'"
    if problem:
        raise ExpectedFileError(f"{where}: {problem}: {line!r}")
    return (op, dtype, phase, int(sample)), klass


def load(path: Path = PATH) -> dict[Key, str]:
    return parse(path.read_text(), path.name) if path.exists() else {}


@dataclasses.dataclass
class Verdict:
    unexpected_failures: list[CaseResult]
    unexpected_passes: list[tuple[Key, str, CaseResult]]  # the listed case, its listed class, and how it ran now
    changed_class: list[tuple[CaseResult, str]]  # still failing, with another class than listed

    @property
    def ok(self) -> bool:
        return not self.unexpected_failures and not self.unexpected_passes

    def lines(self) -> list[str]:
        out = []
        for r in self.unexpected_failures:
            out.append(f"UNEXPECTED FAILURE {format_entry(case_key(r), r.klass)}  {r.status}: {r.error_type} "
                       f"{r.error}".rstrip())
        for key, klass, r in self.unexpected_passes:
            out.append(f"UNEXPECTED PASS    {format_entry(key, klass)}  now {r.status}: delete its line")
        for r, klass in self.changed_class:
            out.append(f"class changed      {format_entry(case_key(r), klass)}  now {r.klass}: {r.error}")
        return out


def check(results: Iterable[CaseResult], expected: dict[Key, str]) -> Verdict:
    """Compare a run's results with the list; only the cases that ran are judged."""
    verdict = Verdict([], [], [])
    for r in results:
        key = case_key(r)
        listed = expected.get(key)
        if r.failed and listed is None:
            verdict.unexpected_failures.append(r)
        elif not r.failed and listed is not None:
            verdict.unexpected_passes.append((key, listed, r))
        elif r.failed and listed != r.klass:
            verdict.changed_class.append((r, listed))
    return verdict


def format_entry(key: Key, klass: str) -> str:
    op, dtype, phase, sample = key
    return f"{op:<44} {dtype:<9} {phase:<9} {sample:<3} {klass}"


HEADER = """\
# ember's OpInfo sweep: the cases that fail today (tests/opinfo; `python -m tests.opinfo run --help`).
# A run reports a failure missing here and a listed case that passes: delete a case's line when it is fixed.
# Columns: op key (name[.variant]), dtype, phase, sample index, failure class (tests/opinfo/cases.py, classify).
"""


def render(entries: dict[Key, str]) -> str:
    rows = [format_entry(k, v) for k, v in sorted(entries.items())]
    return HEADER + "\n".join(rows) + ("\n" if rows else "")


def updated(expected: dict[Key, str], results: Sequence[CaseResult]) -> dict[Key, str]:
    """The list with every case that ran replaced by what it did now: failures in, passes out."""
    entries = dict(expected)
    for r in results:
        key = case_key(r)
        entries.pop(key, None)
        if r.failed:
            entries[key] = r.klass
    return entries
