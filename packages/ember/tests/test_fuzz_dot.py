"""Fuzzing the one DOT reader ember has, `ember show`'s (`_show.parse_dot`; ember-partition writes DOT but never
reads it): damaged diagrams end in a `ValueError` naming a line, or in a diagram `ember show` prints; quickly, with
nothing run, and with no control character of the file printed raw. The module prints its tally at the end."""

from __future__ import annotations

import random

import pytest
from cli_cases import CONTROL, raw_control, seeds
from ember._cli import printable
from ember._show import _dot, parse_dot
from ember_core.testing import PAYLOADS, FuzzFailure, FuzzTally, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

DOT = seeds()["dot"][1]
TALLY = FuzzTally("DOT")
FUZZ = fuzz_settings()
# Pieces that mean something in DOT, to splice in where a mutation lands.
TOKENS = ['"', "<", ">", "<<TABLE>", "</TD>", "{", "}", "[", "]", ";", ",", "=", "->", "--", "/*", "*/", "//", "#",
          "subgraph", "strict", "graph", "digraph", "node", "edge", ":", "\\", "\\n", "label=", "a:p:n", "-.5",
          "{" * 40, "<" * 50, *CONTROL, *PAYLOADS]


@pytest.fixture(scope="module", autouse=True)
def tally(request):
    yield TALLY
    TALLY.report(request.config)


def damaged(text: str, rng: random.Random, edits: int) -> str:
    for _ in range(edits):
        at = rng.randrange(len(text) + 1)
        kind = rng.randrange(4)
        if kind == 0:
            text = text[:at] + rng.choice(TOKENS) + text[at + rng.randrange(3):]
        elif kind == 1:
            text = text[:at]
        elif kind == 2:
            text = text[:at] + text[at + rng.randrange(1, 40):]
        else:
            text = text[:at] + text[rng.randrange(len(text) + 1):]
    return text


class Refused(Exception):
    """`parse_dot` refused the text with a `ValueError` naming the line."""


def shown(text: str, tmp_path_factory) -> str:
    """What `ember show` prints for the DOT text (`printable` is the command's last step)."""
    try:
        graph = parse_dot(text)
    except ValueError as e:
        if not str(e).startswith("line "):
            raise FuzzFailure("crash", f"a ValueError that names no line: {e}") from None
        raise Refused() from None
    path = tmp_path_factory.mktemp("dot") / "g.dot"
    path.write_text(text, newline="")
    out = printable(_dot(path, True))
    if raw_control(out):
        raise FuzzFailure("wrongly accepted", f"printed a control character raw: {raw_control(out)}")
    if not out.startswith(("digraph ", "graph ")) or len(out.splitlines()) != len(graph.nodes) + 1:
        raise FuzzFailure("wrongly accepted", f"printed {len(out.splitlines())} lines for {len(graph.nodes)} nodes")
    return out


@FUZZ
@given(st.integers(0, 2**32), st.integers(1, 6))
def test_damaged_diagrams_end_cleanly(tmp_path_factory, seed, edits):
    text = damaged(DOT, random.Random(seed), edits)
    TALLY.run(lambda: shown(text, tmp_path_factory), refusals=(Refused,))


@FUZZ
@given(st.text(max_size=80))
def test_any_text_ends_cleanly(tmp_path_factory, text):
    TALLY.run(lambda: shown(text, tmp_path_factory), refusals=(Refused,))
