"""Write the golden files of the current schema version from the graph battery.

    .venv/bin/python packages/core/tests/golden/make_golden.py

Run it once when a schema version is released. A released version's folder is never rewritten: every later
ember-core must load it (tests/test_golden.py), which is the point of keeping it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ember_core
import torch
from ember_core import Constant, Graph, Input, Node, Output, Ref, Sym, Symbol, Value
from ember_core.testing import battery_case, gate_graph

HALF = "TruncToInt(0.5*ToFloat(s0))"  # the size `F.interpolate(scale_factor=0.5)` gives a symbolic one
CASES = ("pointwise_chain", "symbolic_sizes", "multi_output", "input_mutation", "constants", "views", "dtypes")


def every_field() -> Graph:
    """A hand-built graph that uses every field, kind and argument tag of the schema."""
    f32 = lambda *shape, stride=None, **kw: Value(shape=shape, stride=stride or _row_major(shape), **kw)  # noqa: E731
    nodes = (
        Node(("v0",), "aten.mul.Tensor", (Ref("x"), Ref("w")), meta={"source": "model.py:12", "module": "layer1"}),
        Node(("v1",), "aten.clamp.default", (Ref("v0"), float("-inf"), 3.5)),
        Node(("m",), "operator.mul", (Ref("s0"), 4)),
        Node(("v2",), "aten.view.default", (Ref("x"), (Sym("4*s0"),))),
        Node(("v3",), "aten.add.Tensor", (Ref("buf"), 1.0)),
        Node(("v4",), "aten.new_zeros.default", (Ref("x"), (Ref("m"),)),
             {"dtype": torch.float16, "layout": torch.strided, "device": torch.device("cpu"), "pin_memory": False}),
        Node(("v5",), "aten.clone.default", (Ref("v0"),), {"memory_format": torch.contiguous_format}),
        Node(("v6",), "aten.select.int", (Ref("x"), 0, -1)),
        Node(("v7",), "aten.div.Tensor_mode", (Ref("v5"), Ref("c_int")), {"rounding_mode": "floor"}),
        Node(("v8",), "aten.sum.dim_IntList", (Ref("v1"), (1,), False), {"dtype": None}, meta={"region": "backward"}),
        Node(("v9", "v10"), "aten.max.dim", (Ref("v7"), 0), meta={"name": "max_1"}),
        Node(("v11",), "aten.logical_and.default", (Ref("c_bool"), Ref("c_bool"))),
        Node(("v12",), "aten.new_zeros.default", (Ref("x"), (Sym(HALF),))),  # since 1.2: a float in a size
    )
    values = {
        "x": f32("s0", 4), "w": f32(4, requires_grad=True), "buf": f32(4), "s0": Value(type="sym", dtype="int64"),
        "v0": f32("s0", 4), "v1": f32("s0", 4), "m": Value(type="sym", dtype="int64"),
        "v2": f32("4*s0", base="x"), "v3": f32(4), "v4": Value(dtype="float16", shape=("4*s0",), stride=(1,)),
        "v5": f32("s0", 4), "v6": f32(4, base="x", storage_offset="4*s0 - 4"), "v7": f32("s0", 4), "v8": f32("s0"),
        "v9": f32(4), "v10": Value(dtype="int64", shape=(4,), stride=(1,)),
        "v11": Value(dtype="bool", shape=(2,), stride=(1,)), "v12": f32(HALF),
    }
    return Graph(
        name="every_field",
        inputs=(Input("x"), Input("w", "param"), Input("buf", "buffer", mutated=True), Input("s0")),
        nodes=nodes,
        outputs=(Output("v1"), Output("v3", "mutation", 2), Output("v2", "alias", 0), Output("v8", "grad"),
                 Output("v6", "saved"), Output("v4"), Output("v9"), Output("v10"), Output("v11"), Output("v12")),
        values=values,
        symbols=(Symbol("s0", 3, 2, None), Symbol("s1", 5, 1, 64)),
        constants={"c_int": Constant("c_int", torch.tensor([1, 2, 3, 4])),
                   "c_bool": Constant("c_bool", torch.tensor([True, False]))},
        producer="hand-built (tests/golden/make_golden.py)",
    )


def _row_major(shape: tuple) -> tuple:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step = d if step == 1 else f"{d}*{step}" if isinstance(d, str) or isinstance(step, str) else d * step
    return tuple(reversed(strides))


def main() -> int:
    major, minor = ember_core.SCHEMA_VERSION
    folder = Path(__file__).parent / f"v{major}.{minor}"
    if folder.exists():
        print(f"{folder} exists: golden files of a released version are never rewritten", file=sys.stderr)
        return 1
    folder.mkdir()
    for name in CASES:
        ember_core.save(battery_case(name).graph, folder / f"{name}.json")
        print(f"wrote {folder / name}.json")
    ember_core.save(ember_core.verify(every_field()), folder / "every_field.json")
    ember_core.save(ember_core.verify(gate_graph()), folder / "custom_function.json")  # since 1.1: subgraphs
    return 0


if __name__ == "__main__":
    sys.exit(main())
