"""Kernels of one body (repeated layers) are printed once per translation unit; the others are references to the
first (`_program.py`, the shared layer's `same_kernels`)."""

from __future__ import annotations

import re

import torch
from ember_codegen_cpp import Builder, CppCodegen, build_program
from ember_codegen_cpp._program import translation_units, unit_lines
from ember_lowering import lower
from helpers import Events, check, clone, trace

ALIAS = re.compile(r"^static constexpr auto& (\w+) = (\w+);  // the same kernel$", re.M)


def _layers(x, w1, w2, w3):
    """Three layers of one body between matmuls: a softmax row (a stash named per plan) of a tanh, whose temporary
    goes in place of a dead product from the second layer on (another parameter name)."""
    h = torch.softmax(torch.tanh(x @ w1) * 2, -1)
    h = torch.softmax(torch.tanh(h @ w2) * 2, -1)
    return (torch.softmax(torch.tanh(h @ w3) * 2, -1),)


def _inputs():
    return torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16)


def _bodies(source: str) -> list[str]:
    return re.findall(r"^(?:__attribute__\S* )?static int (\w+)\(", source, re.M)


def test_the_kernels_of_repeated_layers_are_printed_once_and_give_eagers_result():
    compiled = check(_layers, *_inputs(), atol=1e-6, rtol=1e-5)
    plan = lower(trace(_layers, *_inputs()), emit_event=False)
    program = build_program(plan)
    (body,) = _bodies(program.source)
    assert ALIAS.findall(program.source) == [(k.name, body) for k in program.kernels[1:]]
    assert len(program.kernels) == 3 and "b_stash" in program.kernels[0].text
    assert _bodies(compiled.source) == [body]  # what ran above


def test_kernels_that_differ_in_a_constant_or_a_dtype_keep_their_own_bodies():
    def differ(x, w):
        a = torch.tanh(x @ w) * 2
        b = torch.tanh(a @ w) * 3  # another constant
        c = torch.tanh(b.double() @ w.double()) * 3  # another dtype
        return (c,)

    compiled = check(differ, torch.randn(8, 16), torch.randn(16, 16), atol=1e-5, rtol=1e-5)  # float32 first
    assert len(_bodies(compiled.source)) >= 3 and not ALIAS.search(compiled.source), compiled.source


def test_a_unit_split_in_parts_prints_each_body_once_in_every_part_that_calls_it():
    plan = lower(trace(_layers, *_inputs()), emit_event=False)
    program = build_program(plan)
    units = translation_units(program, 3)  # the first segment holds the body's lines: two parts of about equal lines
    assert len(units) == 2
    for unit in units:  # each part is a library of its own: a reference names a kernel defined in it
        defined = set(_bodies(unit))
        assert len(defined) == 1 and all(first in defined for _, first in ALIAS.findall(unit))
    inputs = _inputs()
    codegen = CppCodegen(Builder(part_lines=1, workers=3))  # the parts built apart and loaded apart
    with Events() as ev:
        compiled = codegen.compile(trace(_layers, *inputs), list(inputs), {})
        got = compiled(clone(inputs))
    assert not ev.kinds("fallback") and compiled.source.count("// ember codegen-cpp: part") == 2
    torch.testing.assert_close(got[0], _layers(*inputs)[0], atol=1e-6, rtol=1e-5)


def test_a_repeated_body_counts_one_line_toward_splitting_a_unit():
    plan = lower(trace(_layers, *_inputs()), emit_event=False)
    program = build_program(plan)
    first = program.kernels[0].text.count("\n") + 1
    assert unit_lines(program) == first + 2


def _states(x, w):
    """A recurrence whose states are concatenated (more pieces than a kernel's cat): lowering's cat-in-place has
    each step's kernel write its state into the cat's buffer, at another offset each time."""
    h, out = x, []
    for _ in range(10):
        h = torch.tanh(h @ w) * 0.5 + h
        out.append(h)
    return (torch.cat(out) * 2,)


def test_kernels_writing_different_parts_of_one_buffer_are_printed_once():
    x, w = torch.randn(4, 16), torch.randn(16, 16)
    compiled = check(_states, x, w, atol=1e-5, rtol=1e-5)
    program = build_program(lower(trace(_states, x, w), emit_event=False))
    steps = [k for k in program.kernels if k.pointers]  # those taking a part's own pointer
    assert len(steps) == 10 and all(k.roots[-1] == "cat" for k in steps)
    first, final = _bodies(program.source)  # the steps' one body (each reads the last state, writes the next)
    assert ALIAS.findall(program.source) == [(k.name, first) for k in steps[1:]]
    # the call adds each part's offset to its root's pointer (a state: 4 x 16 elements)
    assert f"{steps[2].name}(b_mm_2, b_cat + 64, b_cat + 128)" in program.source
    assert _bodies(compiled.source) == [first, final]  # what ran above
