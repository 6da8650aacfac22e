from __future__ import annotations

import torch
from _freezing_graphs import run_frozen, traced
from ember_runtime.freezing import freezable, freeze, freeze_params


def affine(x, w, b):
    return x @ w + b


def test_params_become_constants_sharing_storage():
    w, b, x = torch.randn(4, 3), torch.randn(3), torch.randn(2, 4)
    graph = traced(affine, x, w, b, params=(1, 2))
    frozen = freeze_params(graph, [x, w, b], [1, 2])
    assert frozen.input_names == (graph.input_names[0],)
    assert frozen.constants[graph.input_names[1]].tensor.data_ptr() == w.data_ptr()


def test_user_inputs_and_fake_tensors_are_not_frozen():
    w, b, x = torch.randn(4, 3), torch.randn(3), torch.randn(2, 4)
    graph = traced(affine, x, w, b, params=(1,))
    assert freezable(graph, [x, w, b]) == [1]
    assert freezable(graph, [x, torch.empty(4, 3, device="meta"), b]) == []


def test_an_input_returned_is_not_frozen():
    w, x = torch.randn(3), torch.randn(3)
    graph = traced(lambda x, w: (x + w, w), x, w, params=(1,))
    assert freezable(graph, [x, w]) == []


def test_guard_fails_on_in_place_write_and_new_tensor():
    w, b, x = torch.randn(4, 3), torch.randn(3), torch.randn(2, 4)
    result = freeze(traced(affine, x, w, b, params=(1, 2)), [x, w, b])
    torch.testing.assert_close(run_frozen(result, [x, w, b])[0], affine(x, w, b))
    assert result.guard([x, w, b])
    assert not result.guard([x, w.clone(), b])
    w.add_(1)
    assert not result.guard([x, w, b])
    assert "written in place" in result.changed([x, w, b])


def test_guard_compares_buffers_by_value():
    """A buffer written without a version bump (as batch norm's running statistics are) still fails the guard."""
    w, x = torch.randn(3), torch.randn(3)
    graph = traced(lambda x, w: x + w, x, w)
    graph = graph.replace(inputs=(graph.inputs[0], graph.inputs[1].__class__(graph.inputs[1].name, "buffer")))
    result = freeze(graph, [x, w])
    assert result.guard([x, w])
    w.data.add_(1)  # .data: no version bump
    assert not result.guard([x, w]) and "new values" in result.changed([x, w])
