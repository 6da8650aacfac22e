"""Small hand-built graphs that the printer's and the parser's tests share."""

import torch
from ember_core import Constant, Graph, Input, Node, Output, Ref, Sym, Symbol, Value


def vec(*shape, stride=None, **kw) -> Value:
    """A tensor value, row-major unless `stride` says otherwise (symbolic strides as products of the sizes)."""
    if stride is None:
        stride, step = [], 1
        for d in reversed(shape):
            stride.insert(0, step)
            step = step * d if isinstance(d, int) and isinstance(step, int) else d if step == 1 else f"{d}*{step}"
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
    """Every input and output kind, symbols, a constant, views, a tuple result, a non-cpu device, a backward node."""
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
            "t": vec("s1", "s0", stride=(1, "s1"), base="x"), "ln": vec("s0", "s1", requires_grad=True),
            "mean": vec("s0", 1), "rstd": vec("s0", 1), "m": vec("s0", "s1", requires_grad=True), "b2": vec(4),
            "z": vec("2*s0", dtype="bfloat16", device="cuda:0"), "dg": vec("s0", "s1"),
        },
        constants={"c0": Constant("c0", torch.ones(4))},
    )


def odd_names() -> Graph:
    """Names and strings the text must quote, and arguments of every tag."""
    return Graph(
        name="odd graph",
        producer=' "quoted" producer\n',
        symbols=(Symbol("s0", 5),),
        inputs=(Input("None"), Input("f32"), Input("s0")),
        nodes=(
            Node(("a b",), "aten.div.Tensor_mode", (Ref("None"), Ref("f32")), {"rounding_mode": 'fl"o\nor'},
                 meta={"source": "my file.py:3", "region": "backward", "odd key": "a b", "name": "x=y"}),
            Node(("v",), "aten.view.default", (Ref("a b"), (Sym("4"), Sym("s0 + 1"), -1)), meta={"source": "forward"}),
            Node(("e",), "aten.empty.memory_format", ((2, 3),),
                 {"dtype": torch.int8, "layout": torch.strided, "device": torch.device("cpu"),
                  "pin_memory": False, "memory_format": torch.channels_last}),
            Node(("f",), "aten.fill.Scalar", (Ref("e"), float("-inf"))),
            Node(("g",), "aten.add.Tensor", (Ref("f"), Ref("s0")), meta={"region": "forward"}),
        ),
        outputs=(Output("v"), Output("g"), Output("None", "user", 0)),
        values={"None": vec(4), "f32": vec(4), "s0": Value(type="sym", dtype="int64"), "a b": vec(4),
                "v": vec("4", "s0 + 1", stride=(1, 1), storage_offset="2*s0"),
                "e": vec(2, 3, dtype="int8", stride=(1, 2)), "f": vec(2, 3, dtype="int8", stride=(1, 2)),
                "g": vec(2, 3, dtype="int8", stride=(1, 2), device="meta")},
        constants={"c one": Constant("c one", torch.tensor([True, False])),
                   "half": Constant("half", torch.tensor([0.1, -2.5], dtype=torch.bfloat16)),
                   "empty": Constant("empty", torch.zeros(0, 3, dtype=torch.int64))},
    )


def chain(n: int) -> Graph:
    nodes = tuple(Node((f"v{i + 1}",), "aten.neg.default", (Ref(f"v{i}"),)) for i in range(n))
    return Graph(name="chain", inputs=(Input("v0"),), nodes=nodes, outputs=(Output(f"v{n}"),),
                 values={f"v{i}": vec(4) for i in range(n + 1)})
