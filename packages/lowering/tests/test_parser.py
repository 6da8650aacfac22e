"""Reading the text form: errors name the line and say what was expected."""

import re

import pytest
from ember_lowering import PlanError, parse_plan

HEAD = "# ember kernel plan 'g' on cpu\ndef g(x):\n  x: f32[4] input\n"


@pytest.mark.parametrize("body, message", [
    ("  y: f99[4] temp\n", "unknown dtype 'f99'"),
    ("  kernel k[i0 < 4]:\n    t0: f32 = frobnicate t0\n", "line 5: expected 'NAMES: DTYPE = OP ARGS'"),
    ("  kernel k[i0 < 4]:\n    t0: f32 = load x[i0] if t1\n", "expected 'if MASK else VALUE'"),
    ("  extern y = aten.mm.default(x, open('f'))\n", "bad extern arguments"),
    ("  banana\n", "expected 'NAME: DTYPE[SHAPE] KIND'"),
    ("  y: f32[4] scratch\n", "line 4: unknown buffer kind 'scratch'"),
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


# ---------------------------------------------------------------------------------------------- untrusted text

PAYLOAD = "__import__('builtins').setattr(__import__('builtins'), 'EMBER_CANARY', 1)"


@pytest.fixture
def no_canary():
    import builtins
    yield
    assert not hasattr(builtins, "EMBER_CANARY"), "plan text was run as code"


KERNEL = "  y: f32[4] output\n  kernel k[i0 < 4]:\n    t0: f32 = load x[{index}]\n    store y[i0] = t0\n"


@pytest.mark.parametrize("index", [PAYLOAD, "i0.__class__", "10**10**10", "9" * 5000, "(" * 500 + "i0" + ")" * 500])
def test_index_text_is_parsed_never_run(no_canary, index):
    with pytest.raises(PlanError, match="line 6"):
        parse_plan(HEAD + KERNEL.format(index=index) + "  return (y)\n")


@pytest.mark.parametrize("arg", [PAYLOAD, "torch.ember_probe", "torch.__class__", "sym(" + repr(PAYLOAD) + ")",
                                 "[" * 300 + "]" * 300, "9" * 5000, "x.__class__"])
def test_extern_arguments_are_parsed_never_run(no_canary, monkeypatch, arg):
    monkeypatch.setattr("torch.ember_probe", __import__("torch").float32, raising=False)  # a name only getattr finds
    with pytest.raises(PlanError, match="line 4"):
        parse_plan(HEAD + f"  extern y = aten.add.Tensor(x, {arg})\n  return (y)\n")


def test_extern_arguments_name_dtypes_layouts_and_formats():
    import torch
    text = HEAD + "  extern y = aten.empty.memory_format([4], dtype=torch.float16, layout=torch.strided, " \
                  "memory_format=torch.channels_last)\n  return (y)\n"
    extern = parse_plan(text).steps[0]
    assert extern.kwargs == {"dtype": torch.float16, "layout": torch.strided, "memory_format": torch.channels_last}


@pytest.mark.parametrize("bad", ["  y: f32[4] temp\n  kernel k[i0 < 4]:\n    t0: i64 = const " + "9" * 5000 + "\n",
                                 "# symbols: s0=" + "9" * 5000 + " in [0, inf]\n",
                                 "  return (sym('" + PAYLOAD.replace("'", '"') + "'))\n"])
def test_other_bad_numbers_and_outputs_are_plan_errors(no_canary, bad):
    with pytest.raises(PlanError):
        parse_plan(HEAD + bad + "  return (x)\n")


def test_text_over_the_size_limit_is_refused(monkeypatch):
    monkeypatch.setattr("ember_lowering._parser.MAX_TEXT_CHARS", 50)
    with pytest.raises(PlanError, match="longer than the limit"):
        parse_plan(HEAD + "  return (x)\n")


@pytest.mark.parametrize("op", ["aten.repdat.default", "aten.add.NoSuchOverload", "nope.add.Tensor",
                                "aten.add.__call__", "__builtins__.eval.default"])
def test_an_extern_op_that_does_not_resolve_is_refused(op):
    with pytest.raises(PlanError, match=rf"line 4: unknown op '{re.escape(op)}'"):
        parse_plan(HEAD + f"  extern y = {op}(x)\n  return (y)\n")


@pytest.mark.parametrize("shape", ["s0/2", "ToFloat(s0)", "-s0", "s0 - 9", ", ".join(["10"] * 40)])
def test_buffer_sizes_that_are_not_non_negative_integers_within_int64_are_refused(shape):
    text = f"# ember kernel plan 'g' on cpu\n# symbols: s0=4 in [2, inf]\ndef g(x):\n  x: f32[{shape}] input\n" \
           "  return (x)\n"
    with pytest.raises(PlanError, match="line 4"):
        parse_plan(text)
