"""Kernels that differ only in their names share one `@triton.jit` function (`_dedup.py`)."""

from __future__ import annotations

import torch
from ember_codegen_triton._dedup import canonical, groups, module_text
from ember_codegen_triton._kernel_printer import TritonKernel
from helpers import check


def kernel(name: str, params: str, body: str, origins: str = "x") -> TritonKernel:
    text = f"@triton.jit\ndef {name}({params}, XBLOCK: tl.constexpr):  # from {origins}\n{body}"
    return TritonKernel(name, (), frozenset(), text)


BODY = "    t0 = tl.load({a} + xindex)\n    tl.store({b} + xindex, t0 * 2)"


def test_names_origins_and_parameter_names_do_not_count():
    a = kernel("ember_k1_mul", "b_x, b_y", BODY.format(a="b_x", b="b_y"), "mul")
    b = kernel("ember_k7_mul_1", "b_x_3, b_y_1", BODY.format(a="b_x_3", b="b_y_1"), "mul_4")
    c = kernel("ember_k9_mul_2", "b_x, b_y", BODY.format(a="b_x", b="b_y").replace("* 2", "* 3"))
    assert canonical(a) == canonical(b) != canonical(c)
    assert groups([a, b, c]) == {a.name: a.name, b.name: a.name, c.name: c.name}
    text = module_text([a, b, c])
    assert text.count("@triton.jit") == 2 and f"{b.name} = {a.name}" in text


def test_a_parameter_named_like_the_start_of_another_is_renamed_whole():
    a = kernel("k1", "b_mul, b_mul_1", BODY.format(a="b_mul", b="b_mul_1"))
    b = kernel("k2", "b_add, b_mul", BODY.format(a="b_add", b="b_mul"))
    assert canonical(a) == canonical(b)


def test_repeated_layers_run_through_one_function_each():
    def layers(x, w1, w2):  # a matmul (an extern call) between two layers of the same kernels
        h = torch.softmax(torch.tanh(x @ w1) * 2, -1)
        return (torch.softmax(torch.tanh(h @ w2) * 2, -1),)

    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16)
    compiled = check(layers, x, w1, w2, atol=1e-5, rtol=1e-4)
    defs = [line for line in compiled.source.splitlines() if line.startswith("def ember_")]
    aliases = [line for line in compiled.source.splitlines() if line.endswith("# the same kernel")]
    assert aliases and len(defs) + len(aliases) >= 2, compiled.source
