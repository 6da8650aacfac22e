"""Files for fuzzing the `ember` command: one of each kind `ember show` reads and `ember report` lists, written by
ember itself, and mutations of them (payloads that would run code or leave a marker file, control characters,
cut lines, flipped bytes, other kinds of file under the same name). Shared by test_fuzz_cli.py and
test_fuzz_dot.py."""

from __future__ import annotations

import os
import random
import re
import unicodedata
from pathlib import Path

import ember_core as ec
import torch
from ember_core.report._page import GENERATOR
from ember_core.testing import PAYLOADS, battery_case, marker_payloads

CONTROL = ["\x1b[2J", "\x1b]0;owned\x07", "\x9b31m", "\u202e", "\r", "\x00", "\x7f", "\u2028", "\x1b[6n"]


def _plan_text() -> str:
    from ember_lowering import format_plan, lower

    return format_plan(lower(battery_case("matmul_symbolic").graph, emit_event=False))


def _dot_text() -> str:
    from ember_core.testing import trace_joint
    from ember_partition import DefaultPartitioner
    from ember_partition._diagram import joint_diagram

    case = trace_joint(lambda x: (x.sin() * 2).sum(), [torch.randn(3, requires_grad=True)], name="sinsum")
    return joint_diagram(case.joint, DefaultPartitioner().partition(case.joint, {}))


def seeds() -> dict[str, tuple[str, str]]:
    """kind → (file name, text) of a file of that kind, as ember writes it."""
    graph = battery_case("constants").graph
    return {
        "graph-json": ("000-graph_captured-g.json", ec.dumps(graph)),
        "graph-text": ("000-graph_captured-g.txt", ec.format_graph(graph) + "\n"),
        "plan": ("001-kernels_planned-g.src.txt", _plan_text() + "\n"),
        "source": ("002-guards_built-g.src.txt", "def guard(flat, spec):\n    return spec == 3\n"),
        "dot": ("003-partitioned-g.dot", _dot_text()),
        "svg": ("003-partitioned-g.svg", '<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>\n'),
        "report": ("ember-report-1.html", f'<!doctype html>\n<meta name="generator" content="{GENERATOR}">\n'
                                          "<title>ember report: demo.py (pid 1)</title>\n<body></body>\n"),
    }


def mutate(text: str, rng: random.Random, marker: Path, edits: int) -> str:
    """The text with `edits` changes: a payload, a control character or a piece of its own text spliced in, a
    line cut, dropped or doubled."""
    splices = [*PAYLOADS, *marker_payloads(marker), *CONTROL, '"', "<", "{", "[", "(", "\\", "9" * 30]
    lines = text.split("\n")
    for _ in range(edits):
        k = rng.randrange(len(lines))
        line, at, kind = lines[k], rng.randrange(len(lines[k]) + 1), rng.randrange(5)
        if kind <= 1:
            lines[k] = line[:at] + rng.choice(splices) + line[at + rng.randrange(4):]
        elif kind == 2:
            lines[k] = line[:at]
        elif kind == 3 and len(lines) > 1:
            del lines[k]
        else:
            lines.insert(k, line)
    return "\n".join(lines)


def write_case(folder: Path, name: str, text: str, rng: random.Random) -> Path:
    """Write a mutated file, now and then under a name with control characters, or as a file of another kind
    (fifo, link to a device, folder) under the same name."""
    if rng.random() < 0.1:
        name = rng.choice(CONTROL).replace("\x00", "") + name
    path = folder / name
    other = rng.random()
    if other < 0.03 and hasattr(os, "mkfifo"):
        os.mkfifo(path)
    elif other < 0.06:
        path.symlink_to("/dev/zero")
    elif other < 0.08:
        path.mkdir()
    elif other < 0.2:
        raw = bytearray(text.encode())
        for _ in range(rng.randrange(1, 6)):
            if raw:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        path.write_bytes(bytes(raw))
    else:
        path.write_text(text, newline="")
    return path


def raw_control(text: str) -> str | None:
    """The first character a terminal would act on (a control or format character but newline and tab), shown
    escaped; None when there is none."""
    for ch in text:
        if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return ascii(ch)
    return None


def clean_exit_problem(command: str, rc: int, out: str, err: str, accepted: tuple[int, ...] = (0,),
                       refused: tuple[int, ...] = (2,)) -> str | None:
    """Why the command's exit is not clean: a traceback, an exit code other than the accepted or refused ones, a
    refusal whose first line is not `ember COMMAND: error: ...`, or a control character printed raw."""
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return f"a traceback: {err[-1500:]}"
    if rc not in accepted + refused:
        return f"exit code {rc}: {err[-1500:]}"
    if rc in refused and rc != 1 and not re.match(rf"ember {command}: error: \S", err):
        return f"exit code {rc} without a one-line 'ember {command}: error: ...' message: {err[:300]!r}"
    shown = raw_control(out) or raw_control(err)
    return f"printed a control character raw: {shown}" if shown else None
