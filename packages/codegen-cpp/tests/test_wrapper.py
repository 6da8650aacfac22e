"""The generated wrapper: one build serves every size, inputs in other layouts, views, externs, constants."""

from __future__ import annotations

import torch
from helpers import CODEGEN, Events, check, compile_fn, trace


def test_symbolic_sizes_one_build_serves_every_size():
    x = torch.randn(6, 10)
    with Events() as ev:
        compiled = check(lambda x: (torch.softmax(x, -1), x.sum(0), x.t() * 2), x, mode="symbolic",
                         others=[(torch.randn(3, 17),), (torch.randn(50, 1),), (torch.randn(0, 4),)])
    kinds = ev.kinds_of("codegen-cpp")
    assert kinds.count("build_cache_miss") + kinds.count("build_cache_hit") == 1
    assert "S_s" in compiled.source


def test_wrapper_source_is_straight_line_python():
    compiled = compile_fn(lambda x, y: (x @ y + 1,), torch.randn(4, 5), torch.randn(5, 3))
    wrapper = compiled.source.split("# ---- wrapper (Python) ----\n")[1]
    assert "aten.mm.default" in wrapper and "ember_seg0(" in wrapper and "for " not in wrapper


def test_noncontiguous_inputs_traced_as_such():
    x = torch.randn(8, 6).t()
    y = torch.randn(6, 8)[:, ::2]
    check(lambda x, y: (x + 1, x.sum(1), y * 2), x, y)


def test_inputs_in_another_layout_than_traced_are_copied_or_rerouted():
    compiled = compile_fn(lambda x: (x.exp(), x.sum(1)), torch.randn(5, 7))
    x = torch.randn(7, 5).t()  # same shape, transposed strides
    got = compiled([x])
    torch.testing.assert_close(got[0], x.exp())
    torch.testing.assert_close(got[1], x.sum(1))


def test_size_one_dims_with_odd_strides_take_the_fast_path():
    compiled = compile_fn(lambda x: (x * 3,), torch.randn(1, 5))
    x = torch.randn(5, 5)[:1]  # stride (5, 1), traced as (5, 1)
    y = torch.randn(5, 1).t()  # stride (1, 1)
    torch.testing.assert_close(compiled([y])[0], y * 3)
    torch.testing.assert_close(compiled([x])[0], x * 3)


def test_output_that_is_a_view_of_an_input_aliases_it():
    x = torch.randn(4, 6)
    compiled = compile_fn(lambda x: (x.t(), x[1:3], x + 1), x)
    out = compiled([x])
    assert out[0].data_ptr() == x.data_ptr() and out[0].stride() == (1, 6)
    assert out[1].data_ptr() == x[1:3].data_ptr()


def test_wrong_shape_runs_the_interpreter_not_out_of_bounds():
    compiled = compile_fn(lambda x, y: (x + y,), torch.randn(4, 6), torch.randn(4, 6))
    x, y = torch.randn(4, 6), torch.randn(1, 6)  # broadcasts in eager; the plan assumed (4, 6)
    torch.testing.assert_close(compiled([x, y])[0], x + y)


def test_extern_results_feed_kernels_and_constants_are_read_in_place():
    w = torch.randn(8, 3)
    check(lambda x: (torch.relu(x @ w) + w.sum(0),), torch.randn(5, 8))


def test_interpreted_kernel_writes_into_the_plans_buffers(monkeypatch):
    from ember_codegen_cpp import CannotPrint
    from ember_codegen_cpp import _codegen as _program

    class RefusesReductions(_program.KernelPrinter):
        def print(self):
            if self.k.reduce_dims:
                raise CannotPrint("reductions refused for this test")
            return super().print()

    monkeypatch.setattr(_program, "KernelPrinter", RefusesReductions)
    x = torch.randn(6, 9)
    compiled = check(lambda x: (torch.softmax(x * 2, -1) + 1, (x + 1).sum(0)), x, others=[(torch.randn(6, 9),)],
                     fallback=True)
    assert "_interp" in compiled.source


def test_symbolic_int_inputs_and_outputs():
    graph_fn = lambda x: (x.reshape(-1) * 2, x.shape[0] * 3)  # noqa: E731
    compiled = check(graph_fn, torch.randn(4, 3), mode="symbolic", others=[(torch.randn(7, 3),)])
    assert compiled([torch.randn(5, 3)])[1] == 15


def test_graph_without_kernels_builds_nothing():
    with Events() as ev:
        check(lambda x, y: (x @ y,), torch.randn(3, 4), torch.randn(4, 2))
    assert "build_cache_miss" not in ev.kinds_of("codegen-cpp") and "build_cache_hit" not in ev.kinds_of("codegen-cpp")


def test_codegen_is_reused_by_several_threads():
    import threading

    compiled = CODEGEN.compile(trace(lambda x: (x.cos() * 5,), torch.randn(64)), None, {})
    errors = []

    def run():
        try:
            for _ in range(20):
                x = torch.randn(64)
                torch.testing.assert_close(compiled([x])[0], x.cos() * 5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_outputs_are_inference_tensors_exactly_where_eagers_are():
    # new buffers come from torch's C++ allocation entry point (`_empty_strided_cpu`) and the views the call makes of
    # them from `_reinterpret_tensor`: both must still say what inference mode makes of a new tensor
    fn = lambda x, w: ((x.exp() + 1).reshape(4, 6) @ w, x.sin())  # noqa: E731
    x, w = torch.randn(2, 12), torch.randn(6, 3)
    compiled = compile_fn(fn, x, w)
    assert "_empty_cpu(" in compiled.source and "_reinterpret(" in compiled.source
    for mode in (torch.inference_mode(), torch.no_grad()):
        with mode:
            got, want = compiled([x, w]), fn(x, w)
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e)
            assert g.is_inference() == e.is_inference()
