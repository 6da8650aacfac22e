"""Fuzzing the graph-text reader: mutated copies of the golden graphs' texts end in an `EmberError` or a graph
whose text reads back to the same text and that the oracle passes, quickly, and never run code (see
`ember_core.testing` for the payloads, the canary and the tally the module prints at its end;
`EMBER_FUZZ_EXAMPLES` sets how many cases, `nox -s fuzz` runs many more)."""

import random
import re
from pathlib import Path

import core_graphs
import ember_core as ec
import pytest
from ember_core import GraphError
from ember_core.testing import PAYLOADS, FuzzTally, accepted_graph_problem, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

GOLDEN = sorted((Path(__file__).parent / "golden").glob("v*/*.json"))
_GRAPHS = {p.stem: ec.load(p) for p in GOLDEN} | {
    "every_kind": core_graphs.every_kind(), "odd_names": core_graphs.odd_names()}
SEEDS = {name: ec.format_graph(g) + "\n" for name, g in _GRAPHS.items()}
CONSTANTS = {name: {k: c.tensor for k, c in g.constants.items()} for name, g in _GRAPHS.items()}
TALLY = FuzzTally("graph text")
# Pieces that mean something in graph text, to splice in where a mutation lands.
TOKENS = ["[", "]", "(", ")", "{", "}", ", ", ": ", " = ", "sym(", "sym(s0)", '%"', '"', "@", "@cuda:0", "@nope",
          "torch.strided", "torch.float32", "torch.__class__", "f32", "i64", "b8", "inf", "nan", "-", "1e309", "None",
          "True", "?", "#", "  # backward", "  # m.py:1  module=fc", "requires_grad", " offset=", " base=", " mutated",
          " param", "constant [...]", "constant [1.0, 2]", "return (", "def ", "# symbols: s0=4 in [0, inf]",
          "# default region: forward", "aten.add.Tensor", "operator.mul", "aten.add.__class__", "s0", "s99", "... ",
          "> ", "\t", "\r", "\\u2028", "9" * 30, "1/3", "s0/2", "ToFloat(s0)", "-s0", "PowByNatural(7, 10**30)",
          "1e300", "65520.0", "448.0", "300", "torch._inductor", "torch.onnx", "torch._mkldnn", "f16[1]", "f8e4m3",
          ", ".join(["10"] * 40), "9223372036854775807", "aten.repdat.default", "aten.addmm.default",
          "[inf]", "\x1b[31m", "\u202e"]
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


# What the loaders must refuse, for `_replace_field` to put where it belongs (SYM: a symbol of the seed).
BAD_SIZES = ["1/3", "SYM/2", "ToFloat(SYM)", "-SYM", "SYM - 99", "PowByNatural(7, 10**30)", "LShift(1, SYM)",
             ", ".join(["10"] * 40), f"{2**62}, 4", f"0, {2**63 - 1}, 4", "2**SYM", "SYM**64"]
BAD_NUMBERS = ["1e300", "-1e300", "65520.0", "449.0", "300", "-129", "1.5", "True", "2", str(2**63 - 1), "inf"]
OPS = ["aten.repdat.default", "aten.add.default", "aten.add.NoSuchOverload", "nope.add.Tensor", "aten.addmm.default",
       "aten.sum.dim_IntList", "aten.__lshift__.Scalar", "aten.new_zeros.default", "aten.clone.default"]
ARGUMENTS = ["[inf]", "[1.5]", "[1, 2]", "1.5", "f32", "torch.strided", "torch.channels_last", '"x"', "None", "@cpu"]
_TYPE = re.compile(r"(?<=: )[a-z0-9]+\[([^\]\n]*)\]")
_DATA = re.compile(r"= constant \[([^\]\n]*)\]")
_OP = re.compile(r"= ([A-Za-z_][A-Za-z0-9_.]*)\(")
_ARG = re.compile(r"(?<=[(,] )[^,()\n]+(?=[,)])|(?<=\()[^,()\n]+(?=[,)])")


def _replace_field(text: str, rng: random.Random) -> str:
    """The text with one field replaced by a value of the right place but the wrong meaning: a size that is no
    non-negative integer, a number its constant's dtype cannot hold, an op torch does not have or whose schema the
    arguments do not fit, an argument of the wrong kind."""
    symbols = re.findall(r"([A-Za-z_]\w*)=\d+ in", text) or ["s0"]
    kind = rng.randrange(4)
    pattern, choices = [(_TYPE, BAD_SIZES), (_DATA, BAD_NUMBERS), (_OP, OPS), (_ARG, ARGUMENTS)][kind]
    found = list(pattern.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    start, end = m.span(1) if m.lastindex else m.span()
    value = rng.choice(choices).replace("SYM", rng.choice(symbols))
    if kind == 1 and m.group(1):  # one number of the data, not all of them
        items = m.group(1).split(", ")
        items[rng.randrange(len(items))] = value
        value = ", ".join(items)
    return text[:start] + value + text[end:]


@pytest.fixture(scope="module", autouse=True)
def tally(request):
    yield TALLY
    TALLY.report(request.config)


def _read_back(read, source: str):
    """The graph read, its text reading back to the same text; None when it breaks a rule of `verify` (a clean
    refusal too, counted as one)."""
    graph = read()
    text = ec.format_graph(graph)
    assert ec.format_graph(ec.parse_graph(text, constants={k: c.tensor for k, c in graph.constants.items()})) == text
    try:
        ec.verify(graph)
    except GraphError:
        return None
    return graph, source


def _oracle(result) -> str | None:
    if result is None:
        return None
    graph, source = result
    return accepted_graph_problem(graph) or _infinite_constant(graph, source)


def _infinite_constant(graph: ec.Graph, source: str) -> str | None:
    """An infinity in a constant whose text wrote none: a number too large for its dtype, accepted."""
    for name, c in graph.constants.items():
        line = next((ln for ln in source.splitlines() if re.match(rf"\s*%?\"?{re.escape(name)}\"?: ", ln)), "")
        if c.tensor.is_floating_point() and bool(c.tensor.isinf().any()) and "inf" not in line:
            return f"constant {name!r} holds an infinity its text does not write: {line.strip()[:120]!r}"
    return None


def _check_clean(read, source: str = "") -> None:
    """Reading ends in an EmberError, or in a graph that prints a text reading back to the same text and that the
    oracle passes; in bounded time; with nothing run."""
    TALLY.run(lambda: _read_back(read, source), _oracle)


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 5))
def test_mutated_graph_text_ends_cleanly(name, seed, edits):
    text = _mutate(SEEDS[name], random.Random(seed), edits)
    _check_clean(lambda: ec.parse_graph(text, constants=CONSTANTS[name]), text)


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 3))
def test_fields_replaced_by_values_of_the_wrong_meaning_end_cleanly(name, seed, edits):
    rng, text = random.Random(seed), SEEDS[name]
    for _ in range(edits):
        text = _replace_field(text, rng)
    _check_clean(lambda: ec.parse_graph(text, constants=CONSTANTS[name]), text)


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.text(max_size=40), st.integers(0, 2**32))
def test_random_text_in_a_line_ends_cleanly(name, junk, seed):
    lines = SEEDS[name].splitlines()
    k = random.Random(seed).randrange(len(lines))
    lines[k] = lines[k][: len(lines[k]) // 2] + junk
    text = "\n".join(lines) + "\n"
    _check_clean(lambda: ec.parse_graph(text, constants=CONSTANTS[name]), text)


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
    _check_clean(lambda: ec.load_text(path, constants=CONSTANTS[name]), bytes(raw).decode(errors="replace"))


def test_unmutated_seeds_read_back_exactly():
    for name, text in SEEDS.items():
        graph = ec.parse_graph(text, constants=CONSTANTS[name])
        assert graph == _GRAPHS[name] and ec.format_graph(graph) + "\n" == text
