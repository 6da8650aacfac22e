"""The expected-failures list: the sweep's cases that fail today, one per line with the reason it fails, parsed
strictly (never evaluated).

    # comment
    op-key                      dtype     phase     sample  class             reason
    nn.functional.rrelu         float32   backward  0       random-mismatch   draws other numbers than eager ...
    take                        float32   forward   2       lowering-fallback torch>=2.14 Dynamo reads the ...

`op-key` is the OpInfo's name, `.variant` appended when it has one (`max.reduction_with_dim`). The reason is the
rest of the line (at least a word; no `#`): why the case fails, and why that is accepted for now. It may start with
`torch>=X.Y` or `torch<X.Y`: the line then holds only under those torch versions (a case that fails under one
torch's Dynamo or decompositions and passes under another), and is left out elsewhere. A run reports the
cases that fail without a line here (unexpected failures) and the lines whose case now passes (unexpected passes),
so the list can only shrink: delete a line when its case is fixed. A `fallback` case (a graph that did not build,
lower or print; tests/opinfo/cases.py) fails like any other, so a fallback by design is listed with its reason too.
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
_REASON = re.compile(r"[^\x00-\x1f#]{3,300}")  # printable text, at least a short word
_TORCH = re.compile(r"torch(>=|<)(\d+)\.(\d+)")  # a reason's leading version condition

Key = tuple[str, str, str, int]  # op key, dtype, phase, sample


@dataclasses.dataclass(frozen=True)
class Listed:
    """A case's line: the failure class it fails with, and why it is accepted."""

    klass: str
    reason: str

    def holds(self, torch_version: tuple[int, int]) -> bool:
        """Whether the line applies under this torch (its reason's leading `torch>=X.Y` / `torch<X.Y`, if any)."""
        m = _TORCH.match(self.reason)
        if m is None:
            return True
        at_least = torch_version >= (int(m.group(2)), int(m.group(3)))
        return at_least if m.group(1) == ">=" else not at_least


class ExpectedFileError(ValueError):
    """A line of the expected-failures file that does not parse; the message names the file and line."""


def case_key(result: CaseResult) -> Key:
    op = f"{result.op}.{result.variant}" if result.variant else result.op
    return (op, result.dtype, result.phase, result.sample)


def parse(text: str, source: str = "expected_failures.txt") -> dict[Key, Listed]:
    """Each listed case's class and reason. Raises ExpectedFileError on any line that is not five good fields and a
    reason, or that repeats a case."""
    entries: dict[Key, Listed] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, listed = _parse_line(line, f"{source}:{number}")
        if key in entries:
            raise ExpectedFileError(f"{source}:{number}: the case is listed twice: {line!r}")
        entries[key] = listed
    return entries


def _parse_line(line: str, where: str) -> tuple[Key, Listed]:
    fields = line.split(maxsplit=5)
    problem = None
    if len(fields) < 5:
        problem = f"expected op dtype phase sample class reason, got {len(fields)} fields"
    else:
        op, dtype, phase, sample, klass = fields[:5]
        reason = fields[5].strip() if len(fields) == 6 else ""
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
        elif not _REASON.fullmatch(reason):
            problem = "the reason is missing: after the class, say why the case fails and why that is accepted"
    if problem:
        raise ExpectedFileError(f"{where}: {problem}: {line!r}")
    return (op, dtype, phase, int(sample)), Listed(klass, reason)


def load(path: Path = PATH) -> dict[Key, Listed]:
    return parse(path.read_text(), path.name) if path.exists() else {}


def running_torch() -> tuple[int, int]:
    import torch

    major, minor = re.match(r"(\d+)\.(\d+)", torch.__version__).groups()
    return int(major), int(minor)


@dataclasses.dataclass
class Verdict:
    unexpected_failures: list[CaseResult]
    unexpected_passes: list[tuple[Key, Listed, CaseResult]]  # the listed case, its line, and how it ran now
    changed_class: list[tuple[CaseResult, Listed]]  # still failing, with another class than listed

    @property
    def ok(self) -> bool:
        return not self.unexpected_failures and not self.unexpected_passes

    def lines(self) -> list[str]:
        out = []
        for r in self.unexpected_failures:
            out.append(f"UNEXPECTED FAILURE {format_entry(case_key(r), r.klass)}  {r.status}: {r.error_type} "
                       f"{r.error}".rstrip())
        for key, listed, r in self.unexpected_passes:
            out.append(f"UNEXPECTED PASS    {format_entry(key, listed.klass)}  now {r.status}: delete its line")
        for r, listed in self.changed_class:
            out.append(f"class changed      {format_entry(case_key(r), listed.klass)}  now {r.klass}: {r.error}")
        return out


def check(results: Iterable[CaseResult], expected: dict[Key, Listed],
          torch_version: tuple[int, int] | None = None) -> Verdict:
    """Compare a run's results with the lines that hold under `torch_version` (default: the running torch); only
    the cases that ran are judged."""
    version = torch_version or running_torch()
    verdict = Verdict([], [], [])
    for r in results:
        key = case_key(r)
        listed = expected.get(key)
        listed = listed if listed is not None and listed.holds(version) else None
        if r.failed and listed is None:
            verdict.unexpected_failures.append(r)
        elif not r.failed and listed is not None:
            verdict.unexpected_passes.append((key, listed, r))
        elif r.failed and listed.klass != r.klass:
            verdict.changed_class.append((r, listed))
    return verdict


def format_entry(key: Key, klass: str, reason: str = "") -> str:
    op, dtype, phase, sample = key
    return f"{op:<44} {dtype:<9} {phase:<9} {sample:<3} {klass:<20} {reason}".rstrip()


HEADER = """\
# ember's OpInfo sweep: the cases that fail today (tests/opinfo; `python -m tests.opinfo run --help`).
# A run reports a failure missing here and a listed case that passes: delete a case's line when it is fixed.
# Columns: op key (name[.variant]), dtype, phase, sample index, failure class (tests/opinfo/cases.py, classify),
# then the reason (required): why the case fails, and why that is accepted for now.
"""


def render(entries: dict[Key, Listed]) -> str:
    rows = [format_entry(k, v.klass, v.reason) for k, v in sorted(entries.items())]
    return HEADER + "\n".join(rows) + ("\n" if rows else "")


def updated(expected: dict[Key, Listed], results: Sequence[CaseResult]) -> dict[Key, Listed]:
    """The list with every case that ran replaced by what it did now: failures in, passes out. A case listed before
    keeps its reason; a new one gets `unexplained: <its error>`, for a person to replace with the real reason."""
    entries = dict(expected)
    version = running_torch()
    for r in results:
        key = case_key(r)
        if key in entries and not entries[key].holds(version):
            continue  # another torch's line: this run says nothing about it
        before = entries.pop(key, None)
        if r.failed:
            reason = before.reason if before is not None else _unexplained(r)
            entries[key] = Listed(r.klass, reason)
    return entries


def _unexplained(r: CaseResult) -> str:
    text = re.sub(r"[\x00-\x1f#]+", " ", f"{r.error_type}: {r.error}" if r.error_type else r.error).strip()
    return f"unexplained: {text}"[:300] if len(text) >= 3 else "unexplained"
