"""`cuda_graphed`: recordings per kind of call, static buffers, parameters read in place, outputs never overwritten
while held, and each refusal reported once. The CUDA calls are replaced by a stand-in that works on the CPU: a
"recording" remembers the function and its static inputs, a "replay" runs it again on them and writes the results
into the recorded output tensors, as a real replay overwrites its output buffers. tests/test_gpu.py runs the real
thing on a GPU."""

from __future__ import annotations

import pytest
import torch
from ember_core import CompiledGraph, CudaBackend, Graph, Input, Node, Output, Ref, Value, cuda_graphed, record_events


class StandIn(CudaBackend):
    def __init__(self, fail: Exception | None = None):
        self.recorded = 0
        self.fail = fail

    def record(self, fn, inputs):
        if self.fail is not None:
            raise self.fail
        self.recorded += 1
        outputs = fn(inputs)
        return (fn, inputs, outputs), outputs

    def replay(self, graph):
        fn, inputs, outputs = graph
        for out, new in zip(outputs, fn(inputs)):
            out.copy_(new)

    def serves(self, t):
        return True


def linear_graph(random: bool = False) -> Graph:
    values = {"w": Value(shape=(3, 3), stride=(3, 1)), "x": Value(shape=(2, 3), stride=(3, 1)),
              "y": Value(shape=(2, 3), stride=(3, 1))}
    op = "aten.bernoulli.p" if random else "aten.mm.default"
    args = (Ref("x"), 0.5) if random else (Ref("x"), Ref("w"))
    return Graph(name="lin", inputs=(Input("w", "param"), Input("x")), nodes=(Node(("y",), op, args),),
                 outputs=(Output("y"),), values=values)


def counted(graph: Graph) -> tuple[CompiledGraph, list]:
    calls = []

    def fn(inputs):
        calls.append(1)
        w, x = inputs
        return [x @ w]

    return CompiledGraph(fn, graph, "test"), calls


def test_warm_up_then_record_then_replay_with_the_new_inputs():
    backend = StandIn()
    w = torch.randn(3, 3)
    graphed = cuda_graphed(counted(linear_graph())[0], backend)
    with record_events() as rec:
        for _ in range(4):
            x = torch.randn(2, 3)
            torch.testing.assert_close(graphed([w, x])[0], x @ w)
    assert backend.recorded == 1 and graphed.fn.replays == 3
    assert len(rec.kinds("cuda_graph_recorded")) == 1 and not rec.kinds("fallback")
    assert graphed.codegen == "test+cudagraphs"


def test_parameters_are_read_in_place_and_a_new_parameter_records_again():
    backend = StandIn()
    w = torch.randn(3, 3)
    graphed = cuda_graphed(counted(linear_graph())[0], backend)
    x = torch.randn(2, 3)
    graphed([w, x]), graphed([w, x])
    w.mul_(2)  # updated in place (an optimizer step): the recording reads it where it lives
    torch.testing.assert_close(graphed([w, x])[0], x @ w)
    w2 = torch.randn(3, 3)  # another tensor: recorded again
    torch.testing.assert_close(graphed([w2, x])[0], x @ w2)
    assert backend.recorded == 2


def test_each_shape_is_recorded_and_held_outputs_are_never_overwritten():
    backend = StandIn()
    w = torch.randn(3, 3)
    graphed = cuda_graphed(counted(linear_graph())[0], backend)
    held = []
    for n in (2, 2, 5, 5, 2):  # two kinds of call
        x = torch.randn(n, 3)
        out = graphed([w, x])[0]
        held.append((out, (x @ w).clone()))
    for out, want in held:  # every output the caller kept is still its own call's value
        torch.testing.assert_close(out, want)


def test_a_loop_that_keeps_the_previous_output_alternates_two_recordings():
    backend = StandIn()
    w = torch.randn(3, 3)
    graphed = cuda_graphed(counted(linear_graph())[0], backend)
    out, pointers = None, []
    for _ in range(10):
        x = torch.randn(2, 3)
        out = graphed([w, x])[0]  # the previous `out` is still bound while the call runs
        torch.testing.assert_close(out, x @ w)
        pointers.append(out.data_ptr())
    assert backend.recorded == 2
    assert all(a != b for a, b in zip(pointers[1:], pointers[2:]))  # alternating buffers from the first replay


def test_when_every_recording_is_held_the_call_runs_unrecorded_and_says_why():
    backend = StandIn()
    w = torch.randn(3, 3)
    compiled, calls = counted(linear_graph())
    graphed = cuda_graphed(compiled, backend)
    kept = []
    with record_events() as rec:
        for _ in range(12):
            x = torch.randn(2, 3)
            kept.append((graphed([w, x])[0], x @ w))
    for out, want in kept:
        torch.testing.assert_close(out, want)
    reasons = [e.get("reason") for e in rec.kinds("fallback")]
    assert len(reasons) == 1 and "still held" in reasons[0]
    assert all(e.get("cause") == "cudagraphs" for e in rec.kinds("fallback"))


@pytest.mark.parametrize("case", ["random", "cpu", "failed"])
def test_refusals_run_the_compiled_graph_and_are_reported_once(case):
    backend = StandIn(fail=RuntimeError("operation not permitted when stream is capturing") if case == "failed"
                      else None)
    if case == "cpu":
        backend.serves = lambda t: False
    compiled, calls = counted(linear_graph(random=case == "random"))
    graphed = cuda_graphed(compiled, backend)
    w = torch.randn(3, 3)
    with record_events() as rec:
        for _ in range(3):
            x = torch.randn(2, 3)
            torch.testing.assert_close(graphed([w, x])[0], x @ w)
    assert len(calls) == 3 and backend.recorded == 0
    reasons = [e.get("reason") for e in rec.kinds("fallback")]
    assert len(reasons) == 1
    assert {"random": "random", "cpu": "CPU tensor", "failed": "recording failed"}[case] in reasons[0]


def test_an_expanded_input_is_not_recorded():
    graphed = cuda_graphed(counted(linear_graph())[0], StandIn())
    w = torch.randn(3, 3)
    with record_events() as rec:
        for _ in range(3):
            x = torch.randn(1, 3).expand(2, 3)
            torch.testing.assert_close(graphed([w, x])[0], x @ w)
    assert "expanded" in rec.kinds("fallback")[0].get("reason")
