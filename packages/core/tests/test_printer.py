"""The canonical text form: one line per node, deterministic. Snapshots live in tests/snapshots/ and are
rewritten by `EMBER_ACCEPT=1 pytest packages/core/tests/test_printer.py` (review their diff)."""

from pathlib import Path

import torch
from ember_core import Constant, Graph, Input, Node, Output, Ref, Sym, Symbol, Value, format_graph, format_node
from ember_core._printer import format_arg, format_value
from ember_core.testing import assert_golden

SNAPSHOTS = Path(__file__).parent / "snapshots"


def vec(*shape, stride=None, **kw) -> Value:
    if stride is None:
        stride, step = [], 1
        for d in reversed(shape):
            stride.insert(0, step)
            step = step * d if isinstance(d, int) and isinstance(step, int) else f"{d}*{step}"
    return Value(shape=shape, stride=tuple(stride), **kw)


def pointwise() -> Graph:
    return Graph(
        name="pointwise",
        inputs=(Input("x"), Input("y")),
        nodes=(
            Node(("v0",), "aten.mul.Tensor", (Ref("x"), Ref("y")), meta={"source": "model.py:12"}),
            Node(("v1",), "aten.add.Tensor", (Ref("v0"), 1.0), {"alpha": 2}),
            Node(("v2",), "aten.relu.default", (Ref("v1"),), meta={"source": "model.py:13", "module": "act"}),
        ),
        outputs=(Output("v2"),),
        values={"x": vec(2, 3), "y": vec(2, 3), "v0": vec(2, 3), "v1": vec(2, 3), "v2": vec(2, 3)},
    )


def every_kind() -> Graph:
    return Graph(
        name="step",
        producer="ember-capture 0.1.0 (trace)",
        symbols=(Symbol("s0", 8, 2, None), Symbol("s1", 4, 1, 64)),
        inputs=(Input("x"), Input("w", "param"), Input("buf", "buffer", mutated=True), Input("g", "tangent")),
        nodes=(
            Node(("t",), "aten.t.default", (Ref("x"),)),
            Node(("ln", "mean", "rstd"), "aten.native_layer_norm.default",
                 (Ref("x"), (Sym("s1"),), Ref("w"), None, 1e-5)),
            Node(("m",), "aten.mul.Tensor", (Ref("ln"), Ref("c0"))),
            Node(("b2",), "aten.add.Tensor", (Ref("buf"), 1)),
            Node(("z",), "aten.zeros.default", ((Sym("2*s0"),),),
                 {"dtype": torch.bfloat16, "device": torch.device("cuda:0")}),
            Node(("dg",), "aten.mul.Tensor", (Ref("g"), Ref("rstd")), meta={"region": "backward"}),
        ),
        outputs=(Output("m"), Output("b2", "mutation", 2), Output("t", "alias", 0), Output("dg", "grad"),
                 Output("rstd", "saved"), Output("z")),
        values={
            "x": vec("s0", "s1"), "w": vec("s1", requires_grad=True), "buf": vec(4), "g": vec("s0", "s1"),
            "t": vec("s1", "s0", stride=(1, "s1")), "ln": vec("s0", "s1"), "mean": vec("s0", 1), "rstd": vec("s0", 1),
            "m": vec("s0", "s1"), "b2": vec(4), "z": vec("2*s0", dtype="bfloat16", device="cuda:0"),
            "dg": vec("s0", "s1"),
        },
        constants={"c0": Constant("c0", torch.ones(4))},
    )


def chain(n: int) -> Graph:
    nodes = tuple(Node((f"v{i + 1}",), "aten.neg.default", (Ref(f"v{i}"),)) for i in range(n))
    return Graph(name="chain", inputs=(Input("v0"),), nodes=nodes, outputs=(Output(f"v{n}"),),
                 values={f"v{i}": vec(4) for i in range(n + 1)})


def test_pointwise_graph_text():
    assert_golden(format_graph(pointwise()), SNAPSHOTS / "pointwise.txt")


def test_graph_with_every_kind_text():
    assert_golden(format_graph(every_kind()), SNAPSHOTS / "every_kind.txt")


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


def test_forward_region_is_not_noted_but_backward_is():
    fwd = Node(("v",), "aten.neg.default", (), meta={"region": "forward"})
    bwd = Node(("v",), "aten.neg.default", (), meta={"region": "backward"})
    assert "#" not in format_node(fwd, {}) and format_node(bwd, {}).endswith("# backward")


def test_row_major_strides_are_not_printed():
    assert format_value(vec(2, 3)) == "f32[2, 3]"
    assert format_value(vec("s0", 4)) == "f32[s0, 4]"


def test_other_strides_are_printed_in_braces():
    assert format_value(vec(3, 2, stride=(1, 3))) == "f32[3, 2]{1, 3}"
    assert format_value(vec(4, stride=(2,))) == "f32[4]{2}"


def test_size_one_dims_may_have_any_stride():
    assert format_value(vec(1, 4, stride=(99, 1))) == "f32[1, 4]"


def test_symbolic_row_major_strides_are_recognised():
    assert format_value(vec("s0", "s1", stride=("s1", 1))) == "f32[s0, s1]"


def test_non_tensor_values_print_their_type_and_dtype():
    assert format_value(Value(type="sym", dtype="int64")) == "sym:i64"
    assert format_value(Value(type="scalar", dtype="float64")) == "scalar:f64"


def test_device_other_than_cpu_is_printed():
    assert format_value(vec(2, device="cuda:0")) == "f32[2]@cuda:0"


def test_arguments_print_compactly():
    args = [Ref("a"), Sym("2*s0"), (1, Ref("b")), torch.float16, "floor", torch.device("cpu"), torch.strided, None,
            1e-5]
    assert [format_arg(a) for a in args] == ["a", "2*s0", "[1, b]", "f16", "'floor'", "cpu", "strided", "None", "1e-05"]


def test_mark_points_at_the_node():
    lines = format_graph(chain(3), mark=1).splitlines()
    assert [ln[:2] for ln in lines[2:5]] == ["  ", "> ", "  "]
