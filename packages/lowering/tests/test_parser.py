"""Reading the text form: errors name the line and say what was expected."""

import pytest
from ember_lowering import PlanError, parse_plan

HEAD = "# ember kernel plan 'g' on cpu\ndef g(x):\n  x: f32[4] input\n"


@pytest.mark.parametrize("body, message", [
    ("  y: f99[4] temp\n", "unknown dtype 'f99'"),
    ("  kernel k[i0 < 4]:\n    t0: f32 = frobnicate t0\n", "line 5: expected 'NAMES: DTYPE = OP ARGS'"),
    ("  kernel k[i0 < 4]:\n    t0: f32 = load x[i0] if t1\n", "expected 'if MASK else VALUE'"),
    ("  extern y = aten.mm.default(x, open('f'))\n", "bad extern arguments"),
    ("  banana\n", "expected 'NAME: DTYPE[SHAPE] KIND'"),
])
def test_errors_name_the_line(body, message):
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse_plan(HEAD + body + "  return (x)\n")


def test_header_is_required():
    with pytest.raises(PlanError, match="line 1"):
        parse_plan("def g(x):\n  return (x)\n")


def test_comment_lines_other_than_the_header_ones_are_ignored():
    plan = parse_plan("# ember kernel plan 'g' on cpu\n# a note\ndef g(x):\n  x: f32[4] input\n  return (x)\n")
    assert plan.outputs == ("x",) and plan.passes == ()
