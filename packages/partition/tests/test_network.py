"""The joint graph as a flow network: cuts of hand-made joints whose cheapest choice is known."""

from ember_core import Graph, Input, JointGraph, Node, Output, Ref, Value
from ember_partition import analyze
from ember_partition._mincut import Rematerializer
from ember_partition._network import SINK, SOURCE, CutWeights, build_network, choose


def waist_joint(mask_dtype: str) -> JointGraph:
    """m = x @ w (never recomputed); p, q = m > 0, m < 1 (pointwise); o = p + q; the backward reads p and q."""
    f32 = lambda: Value(shape=(10, 10), stride=(10, 1))  # noqa: E731
    values = {n: f32() for n in ("x", "w", "t", "m", "o", "g1", "g2")}
    values |= {n: Value(dtype=mask_dtype, shape=(10, 10), stride=(10, 1)) for n in ("p", "q")}
    nodes = (
        Node(("m",), "aten.mm.default", (Ref("x"), Ref("w"))),
        Node(("p",), "aten.gt.Scalar", (Ref("m"), 0)),
        Node(("q",), "aten.lt.Scalar", (Ref("m"), 1)),
        Node(("o",), "aten.add.Tensor", (Ref("p"), Ref("q"))),
        Node(("g1",), "aten.mul.Tensor", (Ref("t"), Ref("p"))),
        Node(("g2",), "aten.mul.Tensor", (Ref("g1"), Ref("q"))),
    )
    graph = Graph("waist", (Input("x"), Input("w"), Input("t", "tangent")), nodes,
                  (Output("o"), Output("g2", "grad", 0)), values)
    return JointGraph(graph, num_primals=2, num_forward_outputs=1)


def fast_choice(joint: JointGraph):
    info = analyze(joint)
    return choose(info, Rematerializer(info).weights(None))


def test_two_small_masks_are_saved_rather_than_their_big_source():
    assert fast_choice(waist_joint("bool")).saved == ("p", "q")  # 100 + 100 bytes < 400


def test_one_source_is_saved_rather_than_two_values_as_big():
    assert fast_choice(waist_joint("float32")).saved == ("m",)  # 400 bytes < 400 + 400; p and q run again


def test_cut_value_is_bytes_times_scale_plus_one_unit_per_recomputed_op():
    info = analyze(waist_joint("float32"))
    remat = Rematerializer(info)
    assert fast_choice(waist_joint("float32")).value == 400 * remat.scale + 2


def test_banned_recompute_forces_saving_what_the_backward_reads():
    info = analyze(waist_joint("float32"))
    weights = CutWeights(Rematerializer(info).save, {i: None for i in range(6)})
    assert choose(info, weights).saved == ("p", "q")


def test_value_that_cannot_be_saved_is_recomputed_from_its_input():
    info = analyze(waist_joint("bool"))
    remat = Rematerializer(info)
    weights = CutWeights({**remat.save, "p": None, "q": None}, remat.weights(None).recompute)
    assert choose(info, weights).saved == ("m",)


def test_tangent_readers_are_tied_to_the_sink():
    info = analyze(waist_joint("bool"))
    cut = build_network(info, Rematerializer(info).weights(None)).min_cut(SOURCE, SINK)
    assert ("in", 4) not in cut.source_side and ("in", 5) not in cut.source_side
    assert ("in", 0) in cut.source_side  # the matmul stays in the forward
