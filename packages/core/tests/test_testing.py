"""ember_core.testing helpers: the battery, device moves, random inputs and golden snapshots."""

import ember_core as ec
import pytest
import torch
from ember_core import testing
from ember_core.testing import assert_golden, battery, battery_case, battery_names, graph_to_device, random_inputs


def test_battery_covers_the_promised_ground():
    ops = {n.op for case in battery() for n in case.graph.nodes}
    for op in ("aten.native_layer_norm.default", "aten.max.dim", "aten.split.Tensor", "aten._softmax.default",
               "aten._log_softmax.default", "aten.mm.default", "aten.cat.default", "aten.index_select.default",
               "aten.gather.default", "aten.embedding.default", "aten.where.self", "aten.clamp.default",
               "aten.as_strided.default", "aten.var.correction", "aten.argmax.default", "aten.amax.default"):
        assert op in ops, op
    dtypes = {v.dtype for case in battery() for v in case.graph.values.values()}
    assert {"int64", "int32", "bool", "float16", "bfloat16", "float64", "float32"} <= dtypes


def test_battery_has_symbolic_constant_and_mutation_graphs():
    assert battery_case("symbolic_sizes").graph.symbols
    assert battery_case("constants").graph.constants
    assert battery_case("input_mutation").graph.inputs[0].mutated


def test_case_names_are_known_without_tracing():
    assert "pointwise_chain" in battery_names() and len(set(battery_names())) == len(battery_names())


def test_unknown_case_lists_the_cases():
    with pytest.raises(KeyError, match="no battery case 'nope'; cases: pointwise_chain"):
        battery_case("nope")


def test_inputs_are_fresh_and_reproducible():
    case = battery_case("pointwise_chain")
    a, b = case.inputs, case.inputs
    assert a[0] is not b[0] and torch.equal(a[0], b[0])


def test_graph_to_device_moves_values_constants_and_device_arguments():
    g = graph_to_device(battery_case("symbolic_sizes").graph, "meta")
    assert {v.device for v in g.values.values() if v.type == "tensor"} == {"meta"}
    ones = next(n for n in g.nodes if n.op == "aten.ones.default")
    assert ones.kwargs["device"] == torch.device("meta")
    assert graph_to_device(battery_case("constants").graph, "meta").constants["_tensor_constant0"].tensor.is_meta


def test_graph_already_on_the_device_is_returned_as_is():
    g = battery_case("softmax").graph
    assert graph_to_device(g, "cpu") is g


def test_random_inputs_follow_the_input_values():
    g = battery_case("dtypes_symbolic").graph
    (symbol,) = g.symbols
    inputs = random_inputs(g, sizes={symbol.name: 9})
    want = [torch.int64, torch.int32, torch.bool, torch.float16, torch.bfloat16, torch.float64]
    assert [x.dtype for x in inputs] == want
    assert {x.shape for x in inputs} == {(9,)}
    ec.interpret(g, inputs)


def test_assert_golden_passes_on_equal_text(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_ACCEPT", raising=False)
    (tmp_path / "s.txt").write_text("a\nb\n")
    assert_golden("a\nb", tmp_path / "s.txt")


def test_assert_golden_shows_a_diff_and_how_to_accept(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_ACCEPT", raising=False)
    (tmp_path / "s.txt").write_text("a\nb\n")
    with pytest.raises(AssertionError, match=r"(?s)-b\n\+c.*rerun with EMBER_ACCEPT=1"):
        assert_golden("a\nc", tmp_path / "s.txt")


def test_assert_golden_without_snapshot_says_how_to_write_it(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_ACCEPT", raising=False)
    with pytest.raises(AssertionError, match="no snapshot .*EMBER_ACCEPT=1"):
        assert_golden("x", tmp_path / "new.txt")


def test_accept_flag_rewrites_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_ACCEPT", "1")
    assert_golden("new text", tmp_path / "sub" / "s.txt")
    assert (tmp_path / "sub" / "s.txt").read_text() == "new text\n"


def test_testing_names_load_lazily_and_unknown_ones_fail():
    assert "CodegenConformance" in dir(testing)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        testing.Nope  # noqa: B018


def test_kept_for_backward_counts_what_autograd_keeps_once_per_storage():
    from ember_core.testing import kept_for_backward

    x = torch.randn(256, requires_grad=True)
    w = torch.randn(256, requires_grad=True)
    # mul keeps both operands; exp keeps its result (1 KiB); sin keeps its input, the same storage as exp's result
    assert kept_for_backward(lambda: (x * w).exp().sin().sum(), [x, w]) == 1024
    assert kept_for_backward(lambda: (x * w).exp().sin().sum()) == 3 * 1024
