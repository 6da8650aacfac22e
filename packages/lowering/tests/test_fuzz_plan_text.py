"""Fuzzing the loop-IR reader (plan dumps and plan cache files): mutated copies of the golden plan texts end in a
`PlanError` or a plan that verifies, prints and that the oracle passes, quickly, and never run code (see
`ember_core.testing` for the payloads, the canary and the tally the module prints at its end)."""

import random
import re
from pathlib import Path

import pytest
import sympy
from ember_core import as_sympy
from ember_core.testing import PAYLOADS, FuzzTally, accepted_call_problem, fuzz_settings
from ember_lowering import Extern, format_plan, parse_plan, verify_plan
from hypothesis import given
from hypothesis import strategies as st

SEEDS = {p.stem: p.read_text() for p in sorted((Path(__file__).parent / "snapshots").glob("*.txt"))}
TALLY = FuzzTally("plan text")
INT64_MAX = (1 << 63) - 1
# Tokens that mean something in plan text, to splice in where a mutation lands.
TOKENS = ["[", "]", "(", ")", ", ", ": ", " = ", "  ", "i0", "r0", "s0", "t0", "load", "store", "const", "kernel",
          "loop:", "extern", " local", "sym('s0')", "torch.float32", "torch.ember", "device('cpu')", "f32", "i64",
          "inf", "nan", "-", "1e309", "0x10", "if", "else", "return (", "# symbols: s0=4 in [0, inf]",
          "aten.repdat.default", "aten.addmm.default", "aten.__class__.x", "torch._inductor", "torch.onnx", "s0/2",
          "ToFloat(s0)", "-s0", "PowByNatural(7, 10**30)", ", ".join(["10"] * 40), "[inf]", "[1, 2]"]
FUZZ = fuzz_settings()


def _mutate(text: str, rng: random.Random, edits: int) -> str:
    lines = text.splitlines()
    for _ in range(edits):
        k = rng.randrange(len(lines))
        kind = rng.randrange(5)
        line = lines[k]
        at = rng.randrange(len(line) + 1)
        if kind == 0:  # splice a payload into the line
            lines[k] = line[:at] + rng.choice(PAYLOADS) + line[at + rng.randrange(8):]
        elif kind == 1:  # splice a token
            lines[k] = line[:at] + rng.choice(TOKENS) + line[at + rng.randrange(3):]
        elif kind == 2:
            del lines[k]
        elif kind == 3:
            lines.insert(k, line)
        else:  # replace an index or argument list wholesale
            lines[k] = line.replace("[", "[" + rng.choice(PAYLOADS) + ", ", 1)
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


# What the reader must refuse, for `_replace_field` to put where it belongs (SYM: a symbol of the seed).
BAD_SIZES = ["SYM/2", "ToFloat(SYM)", "-SYM", "SYM - 99", "PowByNatural(7, 10**30)", ", ".join(["10"] * 40),
             f"{2**62}, 4", "2**SYM"]
OPS = ["aten.repdat.default", "aten.add.default", "aten.mm.NoSuchOverload", "nope.mm.default", "aten.addmm.default",
       "aten.__class__.default", "aten.sum.dim_IntList", "aten.neg.default"]
ARGUMENTS = ["[inf]", "[1.5]", "[1, 2]", "1.5", "torch.float32", "torch.strided", "'x'", "None", "device('cpu')"]
_BUFFER = re.compile(r"^  \w+: [a-z0-9]+\[([^\]\n]*)\]", re.M)
_EXTERN_OP = re.compile(r"= ([\w.]+)\(")
_EXTERN_ARG = re.compile(r"(?<=[(,] )[^,()\n]+(?=[,)])|(?<=\()[^,()\n]+(?=[,)])")


def _replace_field(text: str, rng: random.Random) -> str:
    """The text with one field replaced by a value of the right place but the wrong meaning: a buffer size that is
    no non-negative integer, an extern op torch does not have or whose schema its arguments do not fit."""
    symbols = re.findall(r"(\w+)=\d+ in", text) or ["s0"]
    externs = [ln for ln in text.splitlines() if ln.strip().startswith("extern ")]
    kind = rng.randrange(3)
    if kind == 0:
        found = list(_BUFFER.finditer(text))
        value = rng.choice(BAD_SIZES).replace("SYM", rng.choice(symbols))
    elif externs:
        line = rng.choice(externs)
        pattern, value = (_EXTERN_OP, rng.choice(OPS)) if kind == 1 else (_EXTERN_ARG, rng.choice(ARGUMENTS))
        offset = text.index(line)
        found = [m for m in pattern.finditer(text, offset, offset + len(line))]
    else:
        return text
    if not found:
        return text
    m = rng.choice(found)
    start, end = m.span(1) if m.lastindex else m.span()
    return text[:start] + value + text[end:]


@pytest.fixture(scope="module", autouse=True)
def tally(request):
    yield TALLY
    TALLY.report(request.config)


def _read(text: str):
    plan = parse_plan(text)
    verify_plan(plan)
    format_plan(plan)
    return plan


def _oracle(plan) -> str | None:
    """What the reader should have refused, worked out apart from it: an extern call the oracle of graphs refuses
    (`accepted_call_problem`), or a buffer size, stride or offset that is not an integer in [0, 2**63) at the
    symbols' hints."""
    for step in plan.steps:
        problem = accepted_call_problem(step.op, step.args, step.kwargs) if isinstance(step, Extern) else None
        if problem is not None:
            return f"extern {step.op}: {problem}"
    hints = {sympy.Symbol(s.name, integer=True): sympy.Integer(s.hint) for s in plan.symbols}
    for b in plan.buffers:
        for e in (*b.shape, *b.stride, b.offset):
            value = as_sympy(e).xreplace(hints)
            if value.free_symbols:
                continue
            if not (value.is_Integer and 0 <= int(value) <= INT64_MAX):
                return f"buffer {b.name}: {e} is {value} at the hints"
    return None


def _check_clean(text: str) -> None:
    TALLY.run(lambda: _read(text), _oracle)


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 5))
def test_mutated_plan_text_ends_cleanly(name, seed, edits):
    _check_clean(_mutate(SEEDS[name], random.Random(seed), edits))


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 3))
def test_fields_replaced_by_values_of_the_wrong_meaning_end_cleanly(name, seed, edits):
    rng, text = random.Random(seed), SEEDS[name]
    for _ in range(edits):
        text = _replace_field(text, rng)
    _check_clean(text)


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.text(max_size=40), st.integers(0, 2**32))
def test_random_text_in_a_line_ends_cleanly(name, junk, seed):
    lines = SEEDS[name].splitlines()
    k = random.Random(seed).randrange(len(lines))
    lines[k] = lines[k][: len(lines[k]) // 2] + junk
    _check_clean("\n".join(lines) + "\n")


def test_unmutated_seeds_parse_and_verify():
    for text in SEEDS.values():
        plan = parse_plan(text)
        verify_plan(plan)
        assert format_plan(plan) + "\n" == text
