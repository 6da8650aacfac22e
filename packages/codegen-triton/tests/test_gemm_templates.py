"""Matmul templates (`_gemm.py`): under a max-autotune mode an extern mm/addmm/bmm and the pointwise kernel after it
run as one Triton kernel where that is measured faster. Run here in Triton's interpreter: what they compute, what
has a template and what keeps its extern call, the layouts the wrapper checks, the measured choice on disk. Their
build for sm_90 is checked in test_gpu_compile.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy
import torch
import torch.nn.functional as F
from ember_codegen_triton import TritonCodegen
from ember_codegen_triton._autotune import TUNER, UNFUSED
from ember_codegen_triton._gemm import CONFIGS, configs
from ember_core import record_events
from ember_core.testing import assert_golden
from helpers import trace

ALWAYS = {"mode": "max-autotune", "triton.gemm_templates": "always"}
MEASURE = {"mode": "max-autotune"}
SNAPSHOTS = Path(__file__).parent / "snapshots"


def gemms(compiled) -> dict:
    """The wrapper's `TunedGemm`s by name."""
    return {n: g for n, g in compiled.fn.__globals__.items() if n.startswith("_gemm_")}


def run(fn, args, options, mode="fake", others=(), **tol):
    """Compile fn's graph, check every output against eager on args and `others`; the compiled graph and events."""
    with record_events() as rec:
        compiled = TritonCodegen().compile(trace(fn, *args, mode=mode), list(args), options)
        for inputs in (args, *others):
            for got, want in zip(compiled(list(inputs)), fn(*inputs)):
                torch.testing.assert_close(got, want, **tol)
    assert not rec.kinds("fallback"), [e.data["reason"] for e in rec.kinds("fallback")]
    return compiled, rec


W, B = torch.randn(32, 48), torch.randn(48)
CASES = {
    # a residual add and a bias over the kernel's two dims: (i0, i1) are the tile's rows and columns
    "mm_bias_relu_residual": (lambda x, r: (torch.relu(x @ W + B) * 2 + r,),
                              (torch.randn(40, 32), torch.randn(40, 48))),
    # nn.Linear: addmm with its bias added in float32 before the epilogue
    "addmm_gelu": (lambda x: (F.gelu(F.linear(x, W.t(), B)),), (torch.randn(24, 32),)),
    # an epilogue over one flat dim (coalesced): its dim is unflattened from the tile's row-major index
    "mm_flat_epilogue": (lambda x: (torch.sigmoid(x @ W),), (torch.randn(20, 32),)),
    # attention scores: batched, an operand transposed (a view), scaled
    "bmm_scale_tanh": (lambda q, k: (torch.tanh(q @ k.transpose(-1, -2) * 0.125),),
                       (torch.randn(3, 20, 8), torch.randn(3, 24, 8))),
    # operands that are views with offsets and row strides of their own: a slice of rows, a slice of columns
    "sliced_operands": (lambda x: (torch.relu(x[1:, 3:35] @ W[:, 5:45]) + 1,), (torch.randn(21, 40),)),
    # addmm with a bias of the product's shape, and one broadcast down the rows
    "addmm_full_bias": (lambda x, c: (torch.addmm(c, x, W).tanh(),), (torch.randn(20, 32), torch.randn(20, 48))),
    "addmm_row_bias": (lambda x, c: (torch.addmm(c, x, W) * 3,), (torch.randn(20, 32), torch.randn(20, 1))),
    # several outputs of the epilogue
    "mm_two_outputs": (lambda x: ((y := x @ W).relu(), y * 3 - 1), (torch.randn(17, 32),)),
}


@pytest.mark.parametrize("case", CASES)
def test_a_gemm_and_its_epilogue_run_as_one_template_equal_to_eager(case):
    fn, args = CASES[case]
    compiled, rec = run(fn, args, ALWAYS)
    found = gemms(compiled)
    assert len(found) == 1, compiled.source
    (gemm,) = found.values()
    assert gemm.choice not in (None, UNFUSED)  # the template ran
    assert gemm.choice in CONFIGS or gemm.choice in configs(gemm.t.sizes)


def test_bfloat16_operands_accumulate_in_float32_and_round_the_product_as_the_extern_does():
    w = W.bfloat16()
    fn = lambda x, r: ((x @ w).float() * r,)  # noqa: E731 - relative errors kept: no cancellation
    args = (torch.randn(40, 32).bfloat16(), torch.rand(40, 48) + 0.5)
    # the interpreter truncates float32 to bfloat16 where CPUs and GPUs round: one bfloat16 ulp (2**-7 relative)
    compiled, _ = run(fn, args, ALWAYS, atol=1e-2, rtol=1.6e-2)
    template = compiled.source[compiled.source.index("_mm(b_"):]
    assert "t0 = acc.to(tl.bfloat16)" in template
    # the interpreter's tl.dot gets float32 tiles (it multiplies bfloat16 bits as integers; a GPU's does not)
    assert "other=0.0).to(tl.float32)" in template


def test_a_symbolic_batch_of_rows():
    fn = lambda x: (torch.relu(x @ W + B),)  # noqa: E731
    compiled, _ = run(fn, (torch.randn(20, 32),), ALWAYS, mode="symbolic", others=[(torch.randn(37, 32),)])
    assert len(gemms(compiled)) == 1


def test_a_symbolic_batch_of_batched_products():
    fn = lambda q, k: (torch.tanh(q @ k.transpose(-1, -2)),)  # noqa: E731
    args = (torch.randn(3, 20, 8), torch.randn(3, 24, 8))
    compiled, _ = run(fn, args, ALWAYS, mode="symbolic", others=[(torch.randn(5, 17, 8), torch.randn(5, 30, 8))])
    assert len(gemms(compiled)) == 1


def test_an_operand_in_another_layout_is_relaid_out_not_misread():
    fn = lambda x: (torch.relu(x @ W),)  # noqa: E731
    x = torch.randn(20, 32)
    compiled, _ = run(fn, (x,), ALWAYS, others=[(torch.randn(32, 20).t(),)])
    assert len(gemms(compiled)) == 1


def test_float32_products_take_torchs_matmul_precision():
    fn = lambda x: (torch.relu(x @ W),)  # noqa: E731
    compiled, _ = run(fn, (torch.randn(20, 32),), ALWAYS)
    assert 'tl.dot(a, b, input_precision="ieee")' in compiled.source
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        graph = trace(fn, torch.randn(20, 32))
        assert 'input_precision="tf32"' in TritonCodegen().compile(graph, None, ALWAYS).source
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("case", ["returned", "read_by_an_extern", "viewed_later", "batched_returned"])
def test_a_product_that_later_steps_read_is_stored_by_the_template_too(case):
    fn = {"returned": lambda x: ((y := x @ W), y.relu()),  # saved for a backward, say
          "read_by_an_extern": lambda x: ((y := x @ W).relu(), y @ W.t()),
          "viewed_later": lambda x: ((y := x @ W).relu(), y.t().cos()),
          "batched_returned": lambda x: ((y := x @ x.transpose(1, 2)), y.tanh())}[case]
    x = torch.randn(3, 20, 8) if case.startswith("batched") else torch.randn(20, 32)
    # two products in a row: the second sums 48 terms up to ~40 made from the first, which the template rounds in
    # another order than ATen's GEMM (its configuration is measured): a few ulps of those terms, ~2e-5, apart
    tol = {"atol": 1e-4, "rtol": 1.3e-6} if case == "read_by_an_extern" else {}
    compiled, _ = run(fn, (x,), ALWAYS, **tol)
    (gemm,) = gemms(compiled).values()
    assert gemm.t.stores_product and gemm.choice != UNFUSED and gemm.t.product in gemm.t.writes


NOT_FUSED = {
    # the kernel after it reads the product's rows in reverse, not element for element
    "read_flipped": lambda x: ((x @ W).flip(0) * 2,),
    # a reduction follows the GEMM
    "softmax_after": lambda x: (torch.softmax(x @ W, -1),),
    # integer operands: tl.dot takes floats
    "integer_mm": lambda n: ((n @ n.t()) + 1,),
}


@pytest.mark.parametrize("case", NOT_FUSED)
def test_what_keeps_its_extern_call(case):
    fn = NOT_FUSED[case]
    arg = torch.randint(-5, 5, (20, 20)) if case == "integer_mm" else torch.randn(20, 32)
    compiled, _ = run(fn, (arg,), ALWAYS)
    assert not gemms(compiled) and "_gemm_" not in compiled.source


def test_repeated_layers_share_one_template_function():
    w2 = torch.randn(48, 48)
    fn = lambda x: (torch.relu(torch.relu(torch.relu(x @ w2) @ w2) @ w2),)  # noqa: E731
    compiled, _ = run(fn, (torch.randn(20, 48),), ALWAYS, atol=1e-4, rtol=1e-4)
    names = [g.t.name for g in gemms(compiled).values()]
    assert len(names) == 3
    aliases = [line for line in compiled.source.splitlines() if line.endswith("# the same kernel")]
    assert sum(line.split(" = ")[0] in names for line in aliases) == 2, aliases


def test_without_max_autotune_or_when_switched_off_no_template_is_printed():
    fn, args = CASES["addmm_gelu"]
    for options in ({}, {"mode": "max-autotune", "triton.gemm_templates": "never"}, {"mode": "reduce-overhead"}):
        compiled, _ = run(fn, args, options)
        assert "tl.dot" not in compiled.source and not gemms(compiled), options


def test_the_choice_is_measured_against_the_extern_call_stored_and_reused(monkeypatch):
    from ember_codegen_triton import _autotune

    fn, args = CASES["mm_bias_relu_residual"]
    compiled, rec = run(fn, args, MEASURE)
    (gemm,) = gemms(compiled).values()
    tuned = [e for e in rec.kinds("kernel_tuned") if e.data["kernel"] == gemm.t.name]
    assert len(tuned) == 1 and tuned[0].data["candidates"][0] == list(UNFUSED)
    assert tuple(tuned[0].data["choice"]) == gemm.choice
    stored = json.loads((TUNER.cache.directory / f"{tuned[0].data['key']}.choice").read_text())
    assert tuple(stored) == gemm.choice
    timed = []
    monkeypatch.setattr(_autotune.TUNER, "_time", lambda *a: timed.append(1) or 1.0)
    again, _ = run(fn, args, MEASURE)  # a new codegen: every choice comes from disk
    assert timed == [] and next(iter(gemms(again).values())).choice == gemm.choice


def test_where_the_extern_call_is_chosen_the_wrapper_runs_it_and_the_kernel(monkeypatch):
    from ember_codegen_triton import _autotune

    monkeypatch.setattr(_autotune.TUNER, "stored", lambda *a: None)
    monkeypatch.setattr(_autotune.TUNER, "measure", lambda key, kernel, candidates, *a: candidates[0])
    fn, args = CASES["bmm_scale_tanh"]
    compiled, _ = run(fn, args, MEASURE, others=[tuple(torch.randn_like(a) for a in args)])
    assert next(iter(gemms(compiled).values())).choice == UNFUSED


def test_configurations_fit_the_problem():
    small = configs((1, sympy.Integer(20), sympy.Integer(48), sympy.Integer(8)))
    assert all(bm <= 32 and bn <= 64 and bk == 16 for bm, bn, bk, _, _ in small) and len(set(small)) == len(small)
    big = sympy.Integer(4096)
    assert configs((1, sympy.Symbol("s0", integer=True), big, big)) == CONFIGS


def test_the_template_as_printed():
    fn, args = CASES["addmm_gelu"]
    compiled, _ = run(fn, args, ALWAYS)
    text = compiled.source[compiled.source.index("@triton.jit\ndef ember_k1_gelu"):]
    template = text[text.index("@triton.jit", 10):text.index("# ---- wrapper")]
    wrapper = compiled.source[compiled.source.index("def graph_graph(inputs)"):]
    wrapper = wrapper[:wrapper.index("def graph_graph_profiled")]
    assert_golden(template + "\n" + wrapper, SNAPSHOTS / "gemm_template_addmm_gelu.txt")


def test_on_a_cuda_graph_the_stored_product_is_allocated_on_the_graphs_device():
    """What the interpreter (CPU tensors) cannot show: for a CUDA graph, the product a template stores is allocated
    on the graph's device, and the extern path's result is still checked for its dtype (compiled only; no GPU)."""
    from helpers import on_cuda

    fn = lambda x: ((y := x @ W), y.relu())  # noqa: E731 - the product returned: the template stores it
    options = {**ALWAYS, "mode": "max-autotune-no-cudagraphs"}  # the wrapper itself, not its CUDA-graph replay
    compiled = TritonCodegen().compile(on_cuda(trace(fn, torch.randn(20, 32))), None, options)
    assert compiled.fn.__globals__["_device"] == torch.device("cuda:0")
    assert "b_mm = _empty_strided((20, 48), (48, 1), dtype=_dt0, device=_device)" in compiled.source
    assert "_wrong_dtype(_name0, b_mm, _dt0)" in compiled.source  # the extern's result, where it runs
