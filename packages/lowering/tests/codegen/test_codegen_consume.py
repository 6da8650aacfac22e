"""A backward's wrapper (a graph whose inputs are saved values) is also offered as `CompiledGraph.consume`: it takes
its inputs list over, empties it once the inputs are checked and frees each input after its last use, as eager's
backward frees each saved tensor once used. Its fallbacks cannot run on inputs it let go: they raise
`InputsConsumed` (the caller remakes them); a failed build is known before the inputs go, and falls back on them."""

from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch
from ember_core import FallbackWarning, InputsConsumed, record_events
from ember_lowering.codegen import Segment
from lowering_checks import trace
from test_codegen_layer import BrokenBuild, ToyCodegen, ToyWriter
from torch.utils._python_dispatch import TorchDispatchMode


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))


def as_backward(graph):
    """The graph with its inputs of kind `saved`, as a partition's backward has them."""
    return dataclasses.replace(graph, inputs=[dataclasses.replace(i, kind="saved") for i in graph.inputs])


def chain(a, b, w):  # `a` is read first only, `b` last, `w` throughout
    return ((torch.tanh(a @ w) * 2 + 1) @ w.t() + b.exp(),)


def inputs():
    torch.manual_seed(0)
    return [torch.randn(8, 16), torch.randn(8, 16), torch.randn(16, 16)]


def test_a_forward_graph_is_not_offered_consume_and_its_wrapper_is_unchanged():
    compiled = ToyCodegen().compile(trace(chain, *inputs()))
    assert compiled.consume is None
    assert "def graph_graph(inputs):" in compiled.source and "_take" not in compiled.source


def test_consume_gives_fns_result_empties_the_list_and_fn_leaves_it_whole():
    args = inputs()
    compiled = ToyCodegen().compile(as_backward(trace(chain, *args)))
    want = chain(*args)[0]
    kept = list(args)
    torch.testing.assert_close(compiled(kept)[0], want)
    assert len(kept) == 3  # fn: the list is the caller's
    given = list(args)
    torch.testing.assert_close(compiled.consume(given)[0], want)
    assert given == []
    torch.testing.assert_close(compiled.consume(list(args))[0], want)  # and again: nothing is left over


def test_each_input_is_freed_during_the_call_once_its_last_reader_ran():
    """`a` is read by the first matmul only: through `consume`, it is gone by the second (the caller holds it
    nowhere else); through `fn` it lives as long as the caller's list."""
    compiled = ToyCodegen().compile(as_backward(trace(chain, *inputs())))
    for consuming, alive_at_each_mm in ((True, [True, False]), (False, [True, True])):
        args = inputs()
        a = weakref.ref(args[0])
        with AtEachMatmul(lambda a=a: a() is not None) as seen:
            (compiled.consume if consuming else compiled.fn)(args)
        assert seen == alive_at_each_mm


class AtEachMatmul(TorchDispatchMode):
    """Records `probe()` at each aten.mm call."""

    def __init__(self, probe):
        super().__init__()
        self.probe, self.seen = probe, []

    def __enter__(self):
        super().__enter__()
        return self.seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            self.seen.append(self.probe())
        return func(*args, **(kwargs or {}))


class Flagging(ToyWriter):
    """Each segment call is followed by a test of an error flag, as codegen-cpp's and Triton's are; here it is
    always up."""

    def call_segment(self, seg: Segment) -> None:
        super().call_segment(seg)
        self.emit("if _flagged():")
        self.emit("return _on_error(inputs)", 3)
        self.globals["_flagged"] = lambda: True


class FlaggingCodegen(ToyCodegen):
    def wrapper_writer(self, program, fn_name, constants):
        return Flagging(program, fn_name, constants)


def test_a_flagged_kernel_raises_inputs_consumed_through_consume_and_falls_back_through_fn():
    args = inputs()
    compiled = FlaggingCodegen().compile(as_backward(trace(chain, *args)))
    # through fn: the interpreter codegen runs the graph again on the inputs (torch raises its own error there)
    torch.testing.assert_close(compiled(list(args))[0], chain(*args)[0])
    with pytest.raises(InputsConsumed, match=r"graph 'graph' cannot fall back .*kernel flagged.*0 of 3 left"):
        compiled.consume(list(args))


def test_a_failed_build_is_known_before_the_inputs_go_and_falls_back_on_them():
    args = inputs()
    with record_events() as ev, pytest.warns(FallbackWarning, match="the build failed.*disk on fire"):
        compiled = BrokenBuild("1" * 40).compile(as_backward(trace(chain, *args)))
        for _ in range(2):
            given = list(args)
            torch.testing.assert_close(compiled.consume(given)[0], chain(*args)[0])
            assert len(given) == 3  # the fallback needed them: not let go
    assert len(ev.kinds("fallback")) == 1
