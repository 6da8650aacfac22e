"""Fuzzing the loop-IR reader: mutated copies of the golden plan texts end in a `PlanError` or a plan that
verifies and prints, quickly, and never run code (see `ember_core.testing` for the payloads and the canary)."""

import random
import time
from pathlib import Path

from ember_core.testing import PAYLOADS, assert_no_code_ran, fuzz_settings
from ember_lowering import PlanError, format_plan, parse_plan, verify_plan
from hypothesis import given
from hypothesis import strategies as st

SEEDS = {p.stem: p.read_text() for p in sorted((Path(__file__).parent / "snapshots").glob("*.txt"))}
TIME_BOUND_S = 5.0
# Tokens that mean something in plan text, to splice in where a mutation lands.
TOKENS = ["[", "]", "(", ")", ", ", ": ", " = ", "  ", "i0", "r0", "s0", "t0", "load", "store", "const", "kernel",
          "loop:", "extern", " local", "sym('s0')", "torch.float32", "torch.ember", "device('cpu')", "f32", "i64",
          "inf", "nan", "-", "1e309", "0x10", "if", "else", "return (", "# symbols: s0=4 in [0, inf]"]
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


def _check_clean(text: str) -> None:
    start = time.perf_counter()
    try:
        plan = parse_plan(text)
        verify_plan(plan)
    except PlanError:
        pass
    else:
        format_plan(plan)
    assert time.perf_counter() - start < TIME_BOUND_S
    assert_no_code_ran()


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.integers(0, 2**32), st.integers(1, 5))
def test_mutated_plan_text_ends_cleanly(name, seed, edits):
    _check_clean(_mutate(SEEDS[name], random.Random(seed), edits))


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
