"""Fuzzing the graph-text reader: mutated copies of the golden graphs' texts end in an `EmberError` or a graph
whose text reads back to the same text, quickly, and never run code (see `ember_core.testing` for the payloads and
the canary; `EMBER_FUZZ_EXAMPLES` sets how many cases, `nox -s fuzz` runs many more)."""

import random
import time
from pathlib import Path

import core_graphs
import ember_core as ec
from ember_core import EmberError, GraphError
from ember_core.testing import PAYLOADS, assert_no_code_ran, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

GOLDEN = sorted((Path(__file__).parent / "golden").glob("v*/*.json"))
_GRAPHS = {p.stem: ec.load(p) for p in GOLDEN} | {
    "every_kind": core_graphs.every_kind(), "odd_names": core_graphs.odd_names()}
SEEDS = {name: ec.format_graph(g) + "\n" for name, g in _GRAPHS.items()}
CONSTANTS = {name: {k: c.tensor for k, c in g.constants.items()} for name, g in _GRAPHS.items()}
TIME_BOUND_S = 5.0
# Pieces that mean something in graph text, to splice in where a mutation lands.
TOKENS = ["[", "]", "(", ")", "{", "}", ", ", ": ", " = ", "sym(", "sym(s0)", '%"', '"', "@", "@cuda:0", "@nope",
          "torch.strided", "torch.float32", "torch.__class__", "f32", "i64", "b8", "inf", "nan", "-", "1e309", "None",
          "True", "?", "#", "  # backward", "  # m.py:1  module=fc", "requires_grad", " offset=", " base=", " mutated",
          " param", "constant [...]", "constant [1.0, 2]", "return (", "def ", "# symbols: s0=4 in [0, inf]",
          "# default region: forward", "aten.add.Tensor", "operator.mul", "aten.add.__class__", "s0", "s99", "... ",
          "> ", "\t", "\r", "\\u2028", "9" * 30]
FUZZ = fuzz_settings()


def _mutate(text: str, rng: random.Random, edits: int) -> str:
    lines = text.splitlines()
    for _ in range(edits):
        k = rng.randrange(len(lines))
        line, kind = lines[k], rng.randrange(5)
        at = rng.randrange(len(line) + 1)
        if kind == 0:
            lines[k] = line[:at] + rng.choice(PAYLOADS) + line[at + rng.randrange(8):]
        elif kind == 1:
            lines[k] = line[:at] + rng.choice(TOKENS) + line[at + rng.randrange(3):]
        elif kind == 2:
            del lines[k]
        elif kind == 3:
            lines.insert(k, line)
        else:  # cut the line short
            lines[k] = line[:at]
        lines = lines or [""]
    return "\n".join(lines) + "\n"


def _check_clean(read) -> None:
    """Reading ends in an EmberError, or in a graph that prints a text reading back to the same text; in bounded
    time; with nothing run."""
    start = time.perf_counter()
    try:
        graph = read()
    except EmberError:
        pass
    else:
        text = ec.format_graph(graph)
        assert ec.format_graph(ec.parse_graph(text, constants={k: c.tensor for k, c in graph.constants.items()})) \
            == text
        try:
            ec.verify(graph)
        except GraphError:
            pass
    assert time.perf_counter() - start < TIME_BOUND_S
    assert_no_code_ran()


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 5))
def test_mutated_graph_text_ends_cleanly(name, seed, edits):
    text = _mutate(SEEDS[name], random.Random(seed), edits)
    _check_clean(lambda: ec.parse_graph(text, constants=CONSTANTS[name]))


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.text(max_size=40), st.integers(0, 2**32))
def test_random_text_in_a_line_ends_cleanly(name, junk, seed):
    lines = SEEDS[name].splitlines()
    k = random.Random(seed).randrange(len(lines))
    lines[k] = lines[k][: len(lines[k]) // 2] + junk
    text = "\n".join(lines) + "\n"
    _check_clean(lambda: ec.parse_graph(text, constants=CONSTANTS[name]))


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(max_size=8)),
                                                 min_size=1, max_size=6))
def test_mutated_bytes_of_a_text_file_end_cleanly(tmp_path_factory, name, edits):
    raw = bytearray(SEEDS[name].encode())
    for pos, chunk in edits:
        pos %= len(raw) + 1
        raw[pos:pos + len(chunk)] = chunk
    path = tmp_path_factory.mktemp("fuzz") / f"{name}.txt"
    path.write_bytes(bytes(raw))
    _check_clean(lambda: ec.load_text(path, constants=CONSTANTS[name]))


def test_unmutated_seeds_read_back_exactly():
    for name, text in SEEDS.items():
        graph = ec.parse_graph(text, constants=CONSTANTS[name])
        assert graph == _GRAPHS[name] and ec.format_graph(graph) + "\n" == text
