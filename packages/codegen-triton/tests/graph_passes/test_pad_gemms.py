"""Pass `pad-gemms`: CUDA products with rows not a multiple of 16 bytes run on zero-padded operands, their result
copied back to its own shape and layout. Checked without a GPU: the rewritten graph's text, its verification, and
its outputs (run on the CPU by ember-core's interpreter) against the original's."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_triton.graph_passes import PadGemms
from ember_codegen_triton.graph_passes.pad_gemms import Gemm, heuristic
from ember_core import interpret, record_events, verify
from helpers import CODEGEN, on_cuda, on_device, trace

ALWAYS = PadGemms(decide=lambda g: True)


def padded(fn, *args):
    """The CUDA graph of fn before and after the pass (always padding)."""
    graph = on_cuda(trace(fn, *args))
    after = ALWAYS.run(graph)
    verify(after)
    return graph, after


def same_outputs(before, after, args):
    for want, got in zip(interpret(on_device(before, "cpu"), list(args)), interpret(on_device(after, "cpu"),
                                                                                    list(args))):
        assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5)


def ops(graph):
    return [n.op.split(".")[1] for n in graph.nodes]


def test_an_lm_head_with_n_not_a_multiple_of_eight_gets_n_padded_and_its_result_copied_back():
    x, w = torch.randn(6, 16, dtype=torch.bfloat16), torch.randn(16, 50, dtype=torch.bfloat16)
    before, after = padded(torch.mm, x, w)
    assert ops(after) == ["constant_pad_nd", "mm", "slice", "clone"]
    text = str(after)
    assert "arg1_1_padded: bf16[16, 56]@cuda:0 = aten.constant_pad_nd.default(arg1_1, [0, 6], 0.0)" in text
    assert "mm_padded: bf16[6, 56]@cuda:0 = aten.mm.default(arg0_1, arg1_1_padded)" in text
    assert "mm_cut: bf16[6, 50]{56, 1}@cuda:0 base=mm_padded = aten.slice.Tensor(mm_padded, 1, 0, 50)" in text
    assert "mm: bf16[6, 50]@cuda:0 = aten.clone.default(mm_cut, memory_format=torch.contiguous_format)" in text
    assert after.values[after.outputs[0].name] == before.values[before.outputs[0].name]  # same name, layout
    same_outputs(before, after, [x, w])


def test_k_padding_pads_both_operands_and_keeps_the_result_as_it_was():
    x, w = torch.randn(5, 30), torch.randn(30, 8)  # float32: K = 30 is 2 short of a multiple of 4
    before, after = padded(torch.mm, x, w)
    assert ops(after) == ["constant_pad_nd", "constant_pad_nd", "mm"]
    assert "arg0_1_padded: f32[5, 32]@cuda:0 = aten.constant_pad_nd.default(arg0_1, [0, 2], 0.0)" in str(after)
    assert "arg1_1_padded: f32[32, 8]@cuda:0 = aten.constant_pad_nd.default(arg1_1, [0, 0, 0, 2], 0.0)" in str(after)
    same_outputs(before, after, [x, w])


def test_addmm_pads_its_bias_with_n():
    b, x, w = torch.randn(10), torch.randn(4, 12), torch.randn(12, 10)
    before, after = padded(lambda b, x, w: torch.addmm(b, x, w), b, x, w)
    assert ops(after) == ["constant_pad_nd", "constant_pad_nd", "addmm", "slice", "clone"]
    same_outputs(before, after, [b, x, w])


def test_bmm_pads_its_last_two_dims():
    a, b = torch.randn(3, 4, 7, dtype=torch.float16), torch.randn(3, 7, 9, dtype=torch.float16)
    before, after = padded(torch.bmm, a, b)
    assert "bmm_padded: f16[3, 4, 16]@cuda:0 = aten.bmm.default(arg0_1_padded, arg1_1_padded)" in str(after)
    same_outputs(before, after, [a, b])


def test_a_linear_layer_after_padding_gives_the_same_loss_and_gradients():
    def loss(x, w, b):
        return (torch.nn.functional.linear(x, w, b).tanh().sum(),)

    x, w, b = torch.randn(6, 20), torch.randn(33, 20), torch.randn(33)
    before, after = padded(loss, x, w, b)
    assert "addmm" in ops(after) and "clone" in ops(after)
    grads = []
    for graph in (before, after):  # the ATen calls run under eager autograd: the pads' and the copy's backward
        inputs = [t.clone().requires_grad_() for t in (x, w, b)]
        (out,) = interpret(on_device(graph, "cpu"), inputs)
        out.backward()
        grads.append([out.detach(), *(t.grad for t in inputs)])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5)


def test_aligned_products_cpu_graphs_and_declined_ones_are_left_alone():
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    graph = on_cuda(trace(torch.mm, x, w))
    assert ALWAYS.run(graph) is graph  # aligned already
    odd = trace(torch.mm, torch.randn(3, 5), torch.randn(5, 7))
    assert ALWAYS.run(odd) is odd  # a CPU graph
    seen = []
    cuda_odd = on_cuda(odd)
    assert PadGemms(decide=lambda g: seen.append(g) or False).run(cuda_odd) is cuda_odd
    assert seen == [Gemm("aten.mm.default", 0, 3, 5, 7, "float32", "cuda:0")]
    assert (seen[0].kp, seen[0].np) == (8, 8)


@pytest.mark.parametrize("m, k, n, dtype, pads", [
    (4096, 768, 50257, "bfloat16", True),  # GPT-2's LM head
    (64, 64, 100, "bfloat16", False),  # small: the copies cost more than a slow tile saves
    (4096, 768, 200, "float32", False),  # the misaligned size too narrow for a tensor-core tile to matter
    (4096, 1001, 4096, "float32", True),
])
def test_without_a_gpu_the_heuristic_pads_large_products_only(m, k, n, dtype, pads):
    assert heuristic(Gemm("aten.mm.default", 0, m, k, n, dtype, "cuda:0")) is pads


def test_the_padded_graphs_kernels_match_eager_in_tritons_interpreter():
    """The rewritten graph through the Triton codegen (pads, the product, the copy fused into the relu after it;
    kernels run by Triton's interpreter on the CPU): eager's outputs, no fallback."""
    def head(b, x, w):
        return (torch.addmm(b, x, w).relu(),)

    args = (torch.randn(10), torch.randn(4, 12), torch.randn(12, 10))
    _, after = padded(head, *args)
    with record_events() as rec:
        got = CODEGEN.compile(on_device(after, "cpu"), list(args), {})([a.clone() for a in args])
    assert not rec.kinds("fallback"), [e.data["reason"] for e in rec.kinds("fallback")]
    torch.testing.assert_close(got[0], head(*args)[0], rtol=1.3e-6, atol=1e-5)
