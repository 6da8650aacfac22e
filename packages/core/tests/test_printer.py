"""The canonical text form: one line per node, deterministic. Snapshots live in tests/snapshots/ and are
rewritten by `EMBER_ACCEPT=1 pytest packages/core/tests/test_printer.py` (review their diff)."""

from pathlib import Path

import torch
from core_graphs import chain, every_kind, odd_names, pointwise, vec
from ember_core import Node, Ref, Sym, Value, format_graph, format_node
from ember_core.graph._printer import format_arg, format_value
from ember_core.testing import assert_golden

SNAPSHOTS = Path(__file__).parent / "snapshots"


def test_pointwise_graph_text():
    assert_golden(format_graph(pointwise()), SNAPSHOTS / "pointwise.txt")


def test_graph_with_every_kind_text():
    assert_golden(format_graph(every_kind()), SNAPSHOTS / "every_kind.txt")


def test_names_and_strings_that_need_quoting_text():
    assert_golden(format_graph(odd_names()), SNAPSHOTS / "odd_names.txt")


def test_marked_window_text():
    assert_golden(format_graph(chain(30), mark=15, window=3), SNAPSHOTS / "marked_window.txt")


def test_printing_is_deterministic():
    g = every_kind()
    shuffled = g.replace(values=dict(reversed(list(g.values.items()))))
    assert format_graph(g) == format_graph(every_kind()) == format_graph(shuffled)


def test_node_line_has_outputs_types_op_args_and_source():
    node = Node(("v0",), "aten.mul.Tensor", (Ref("x"), 2), meta={"source": "m.py:3"})
    assert format_node(node, {"v0": vec(2)}) == "v0: f32[2] = aten.mul.Tensor(x, 2)  # m.py:3"


def test_kwargs_print_sorted_after_args():
    node = Node(("v0",), "aten.op.x", (Ref("a"),), {"z": 1, "b": 2})
    assert format_node(node, {}).endswith("= aten.op.x(a, b=2, z=1)")


def test_value_without_metadata_prints_a_question_mark():
    assert format_node(Node(("v0",), "aten.neg.default", (Ref("a"),)), {}).startswith("v0: ? =")


def test_region_is_noted_unless_it_is_the_default():
    fwd = Node(("v",), "aten.neg.default", (), meta={"region": "forward"})
    bwd = Node(("v",), "aten.neg.default", (), meta={"region": "backward"})
    assert format_node(fwd, {}).endswith("# forward") and format_node(bwd, {}).endswith("# backward")
    assert "#" not in format_node(fwd, {}, default_region="forward")


def test_every_meta_entry_is_printed_source_first():
    node = Node(("v",), "aten.neg.default", (), meta={"module": "fc", "source": "m.py:3", "region": "backward"})
    assert format_node(node, {}).endswith("# m.py:3  backward  module=fc")


def test_row_major_strides_are_not_printed():
    assert format_value(vec(2, 3)) == "f32[2, 3]"
    assert format_value(vec("s0", 4)) == "f32[s0, 4]"


def test_other_strides_are_printed_in_braces():
    assert format_value(vec(3, 2, stride=(1, 3))) == "f32[3, 2]{1, 3}"
    assert format_value(vec(4, stride=(2,))) == "f32[4]{2}"


def test_size_one_dims_print_strides_unless_row_major():
    assert format_value(vec(1, 4)) == "f32[1, 4]"
    assert format_value(vec(1, 4, stride=(99, 1))) == "f32[1, 4]{99, 1}"
    assert format_value(vec(4, 0, stride=(1, 1))) == "f32[4, 0]"  # torch steps over a size-0 dim as over a size-1 one


def test_symbolic_row_major_strides_are_recognised():
    assert format_value(vec("s0", "s1", stride=("s1", 1))) == "f32[s0, s1]"


def test_non_tensor_values_print_their_type_and_dtype():
    assert format_value(Value(type="sym", dtype="int64")) == "sym:i64"
    assert format_value(Value(type="scalar", dtype="float64")) == "scalar:f64"


def test_offset_grad_and_base_print_as_words_after_the_type():
    assert format_value(vec(2, storage_offset=3, requires_grad=True, base="x")) == \
        "f32[2] offset=3 requires_grad base=x"
    assert format_value(vec("s0", storage_offset="2*s0")) == "f32[s0] offset=sym(2*s0)"


def test_device_other_than_cpu_is_printed():
    assert format_value(vec(2, device="cuda:0")) == "f32[2]@cuda:0"


def test_arguments_print_compactly_and_each_tag_reads_differently():
    args = [Ref("a"), Sym("2*s0"), (1, Ref("b")), torch.float16, "floor", torch.device("cpu"), torch.strided, None,
            1e-5, 1.0, 1, True, float("inf"), Ref("None"), Ref("f16"), Ref("a b"), torch.contiguous_format]
    assert [format_arg(a) for a in args] == [
        "a", "sym(2*s0)", "[1, b]", "f16", '"floor"', "@cpu", "torch.strided", "None", "1e-05", "1.0", "1", "True",
        "inf", '%"None"', '%"f16"', '%"a b"', "torch.contiguous_format"]


def test_mark_points_at_the_node():
    lines = format_graph(chain(3), mark=1).splitlines()
    assert [ln[:2] for ln in lines[2:5]] == ["  ", "> ", "  "]


def test_small_constants_print_their_data_and_large_ones_do_not():
    g = every_kind()
    assert "  c0: f32[4] = constant [1.0, 1.0, 1.0, 1.0]" in format_graph(g).splitlines()
    big = g.replace(constants={"c0": g.constants["c0"].__class__("c0", torch.zeros(65))})
    assert "  c0: f32[65] = constant [...]" in format_graph(big).splitlines()
