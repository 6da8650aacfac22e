"""How the wrapper makes the tensors it hands around: a buffer in its root's very layout is the root itself; on the
CPU, new buffers and views of storage the call made come from torch's C++ entry points (`FAST_CPU_TENSORS`), and
what the caller receives is made the documented way, a view of its storage."""

from __future__ import annotations

import pytest
import torch
from ember_core.testing import graph_to_device
from ember_lowering.codegen import _wrapper
from lowering_checks import trace
from test_codegen_layer import ToyCodegen, ToyWriter


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))


def wrapper_of(compiled) -> str:
    """The fast wrapper's body (not its profiled twin)."""
    src = compiled.source
    return src[src.index("def graph_graph(inputs):"):src.index("def graph_graph_profiled")]


def run(fn, *args, codegen=None):
    compiled = (codegen or ToyCodegen()).compile(trace(fn, *args))
    got, want = compiled(list(args)), fn(*args)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    return compiled, got


def mm_chain(x, w):  # the add is written over the first matmul's result, then read by the second matmul
    y = x @ w.t()
    return ((torch.tanh(y) * 0.5 + y) @ w,)


def reshaped(x, w):  # a kernel's result viewed in another shape for a matmul
    return ((x.exp() + 1).reshape(4, 6) @ w,)


def sliced(x, w, v):  # views at an offset, of a kernel's result and of a matmul's
    y = x @ w
    return (x.exp()[2:] @ w, y[1:4] @ v)


def viewed_outputs(x):
    y = x.exp()
    return y, y.t(), y.reshape(6, 4)


def test_a_buffer_in_its_roots_very_layout_is_the_root_itself():
    compiled, _ = run(mm_chain, torch.randn(5, 3), torch.randn(6, 3))
    body = wrapper_of(compiled)
    assert "b_add = b_mm\n" in body and "_as_strided(b_mm" not in body and "_reinterpret(b_mm" not in body


def test_on_the_cpu_buffers_and_views_of_the_calls_own_storage_come_from_torchs_entry_points():
    assert _wrapper.FAST_CPU_TENSORS is not None  # every torch ember supports has them; else this test is moot
    compiled, _ = run(reshaped, torch.randn(2, 12), torch.randn(6, 3))
    body = wrapper_of(compiled)
    assert "b_add = _empty_cpu((2, 12), (12, 1), _dt0)" in body
    assert "_reinterpret(b_add, (4, 6), (6, 1), 0)" in body
    assert "_empty_strided(" not in body and "_as_strided(" not in body


def test_a_reinterpreted_offset_counts_from_the_roots():
    compiled, _ = run(sliced, torch.randn(6, 4), torch.randn(4, 5), torch.randn(5, 2))
    body = wrapper_of(compiled)
    assert "_reinterpret(b_exp, (4, 4), (4, 1), 8)" in body  # rows 2.. of a 6x4 kernel result
    assert "_reinterpret(b_mm, (3, 5), (5, 1), 5)" in body  # rows 1..3 of a 6x5 matmul result


def test_what_the_caller_receives_is_a_view_of_its_storage():
    x = torch.randn(4, 6)
    compiled, got = run(viewed_outputs, x)
    body = wrapper_of(compiled)
    assert "b_permute = _as_strided(b_exp, (6, 4), (1, 6), 0)" in body and "_reinterpret" not in body
    assert got[1]._base is got[0] and got[2]._base is got[0]
    got[0].add_(1)  # as in eager: a write through one output shows in its views
    torch.testing.assert_close(got[1], got[0].t())
    torch.testing.assert_close(got[2], got[0].reshape(6, 4))


def test_inputs_are_viewed_the_documented_way():
    compiled, _ = run(mm_chain, torch.randn(5, 3), torch.randn(6, 3))
    assert "_as_strided(b_arg1_1, (3, 6), (1, 3), b_arg1_1.storage_offset())" in wrapper_of(compiled)


def test_without_torchs_entry_points_the_wrapper_calls_the_public_functions(monkeypatch):
    monkeypatch.setattr(_wrapper, "FAST_CPU_TENSORS", None)
    compiled, _ = run(reshaped, torch.randn(2, 12), torch.randn(6, 3))
    body = wrapper_of(compiled)
    assert "_empty_strided((2, 12), (12, 1), dtype=_dt0, device=_device)" in body
    assert "_as_strided(b_add, (4, 6), (6, 1), 0)" in body and "_empty_cpu" not in body
    run(sliced, torch.randn(6, 4), torch.randn(4, 5), torch.randn(5, 2))


class PublicOnlyWriter(ToyWriter):
    cpu_fast_paths = False


class PublicOnlyCodegen(ToyCodegen):
    def wrapper_writer(self, program, fn_name, constants):
        return PublicOnlyWriter(program, fn_name, constants)


def test_a_codegen_may_keep_the_public_functions():
    compiled, _ = run(reshaped, torch.randn(2, 12), torch.randn(6, 3), codegen=PublicOnlyCodegen())
    body = wrapper_of(compiled)
    assert "_empty_strided(" in body and "_as_strided(b_add" in body and "_empty_cpu" not in body
    compiled, _ = run(mm_chain, torch.randn(5, 3), torch.randn(6, 3), codegen=PublicOnlyCodegen())
    assert "b_add = b_mm\n" in wrapper_of(compiled)  # no view to make on any device


class AnyDeviceCodegen(ToyCodegen):
    def serves(self, device: str) -> bool:
        return True


@pytest.mark.parametrize("fn, args", [(reshaped, (torch.randn(2, 12), torch.randn(6, 3))),
                                      (mm_chain, (torch.randn(5, 3), torch.randn(6, 3)))])
def test_a_plan_for_cuda_allocates_and_views_on_its_device(fn, args):
    # built, never run: torch's CPU entry points would put a CUDA plan's buffers in host memory, which Triton's
    # interpreter (CPU tensors) could not show
    compiled = AnyDeviceCodegen().compile(graph_to_device(trace(fn, *args), "cuda:0"))
    assert compiled.codegen == "toy"
    body = wrapper_of(compiled)
    assert "_empty_cpu" not in body and "_reinterpret" not in compiled.source
    assert compiled.fn.__globals__["_device"] == torch.device("cuda:0")
    if fn is reshaped:
        assert "b_add = _empty_strided((2, 12), (12, 1), dtype=_dt0, device=_device)" in body
        assert "_as_strided(b_add, (4, 6), (6, 1), 0)" in body
    else:
        assert "b_add = b_mm\n" in body  # no view to make, on any device


def states(x, w):  # a recurrence whose states are concatenated: each is written into the cat's buffer (cat-in-place)
    h, out = x, []
    for _ in range(10):
        h = torch.tanh(h @ w) + h
        out.append(h)
    return (torch.cat(out) * 2,)


def test_a_cat_assembled_in_place_is_allocated_before_its_first_part_and_its_parts_are_views_of_it():
    compiled, _ = run(states, torch.randn(4, 16), torch.randn(16, 16))
    body = wrapper_of(compiled)
    assert "aten.cat" not in body
    alloc = body.index("b_cat = _empty_cpu((40, 16), (16, 1), ")
    assert alloc < body.index("k1_tanh")  # before the first kernel writes a part of it
    assert "_reinterpret(b_cat, (4, 16), (16, 1), 64)" in body  # the second state, read by the next matmul


def test_a_cuda_plans_assembled_cat_is_allocated_and_viewed_on_its_device():
    compiled = AnyDeviceCodegen().compile(graph_to_device(trace(states, torch.randn(4, 16), torch.randn(16, 16)),
                                                          "cuda:0"))
    body = wrapper_of(compiled)
    assert "b_cat = _empty_strided((40, 16), (16, 1), dtype=_dt0, device=_device)" in body
    assert "_as_strided(b_cat, (4, 16), (16, 1), 64)" in body
