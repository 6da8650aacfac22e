"""The report's diagrams: a layered layout in pure Python (networkx for the layers), drawn as escaped SVG."""

import re

from ember_core.report._diagrams import captured_diagram, op_kind, partition_diagram
from ember_core.report._layout import layered_layout
from ember_core.report._svg import Diagram, DiagramNode, render_svg
from ember_core.testing import RegionPartitioner, battery_case, joint_case

SIZES = {n: (60.0, 30.0) for n in "abcdefw"}


def test_readers_sit_below_what_they_read_and_boxes_of_a_layer_do_not_overlap():
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e"), ("w", "e")]
    layout = layered_layout(list("abcdwe"), edges, SIZES)
    for writer, reader in edges:
        assert layout.boxes[reader].top > layout.boxes[writer].bottom
    b, c = layout.boxes["b"], layout.boxes["c"]
    assert b.y == c.y and abs(b.x - c.x) >= 60
    assert all(0 < box.x < layout.width and 0 < box.y < layout.height for box in layout.boxes.values())


def test_an_input_read_late_sits_just_above_its_reader():
    layout = layered_layout(list("abcdw"), [("a", "b"), ("b", "c"), ("c", "d"), ("w", "d")], SIZES)
    assert layout.boxes["w"].y == layout.boxes["c"].y


def test_barycentre_sweeps_uncross_two_chains():
    # a→d and b→c drawn in the order a, b / c, d cross; the sweeps put c under b
    layout = layered_layout(["a", "b", "c", "d"], [("a", "d"), ("b", "c")], SIZES)
    assert (layout.boxes["a"].x < layout.boxes["b"].x) == (layout.boxes["d"].x < layout.boxes["c"].x)


def test_svg_escapes_labels_tooltips_and_links():
    evil = "<script>alert(1)</script>"
    diagram = Diagram(nodes=[DiagramNode("a", (evil, evil), "x", tooltip=evil, href='#a" onclick="x')],
                      colours={"x": "#fff"}, legend={"x": evil})
    svg = render_svg(diagram, title=evil)
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert 'onclick="x"' not in svg


def test_a_captured_graph_draws_a_box_per_input_and_node_coloured_by_op_kind():
    graph = battery_case("matmul").graph
    diagram = captured_diagram(graph, lambda name: f"#v-{len(name)}")
    assert len(diagram.nodes) == len(graph.inputs) + len(graph.nodes)
    assert {n.role for n in diagram.nodes} >= {"input", "matmul"}
    svg = render_svg(diagram, "matmul")
    assert svg.count("<rect") == len(diagram.nodes) + len(diagram.legend)
    assert len(re.findall(r'class="edge"', svg)) == len(set(diagram.edges))


def test_op_kinds():
    assert [op_kind(o) for o in ("aten.view.default", "aten.addmm.default", "aten.sum.dim_IntList",
                                 "aten.mul.Tensor", "ember.custom_function.default")] == \
        ["view", "matmul", "reduction", "pointwise", "other"]


def test_partition_diagram_colours_forward_backward_and_saved_nodes():
    joint = joint_case("softmax").joint
    part = RegionPartitioner().partition(joint)
    diagram = partition_diagram(joint, part, lambda n: None, lambda n: None)
    roles = {n.key: n.role for n in diagram.nodes}
    assert {roles[i.name] for i in joint.graph.inputs} == {"primal", "tangent"}
    assert "backward" in roles.values() and roles.keys() >= set(part.saved) - {i.name for i in joint.graph.inputs}
    assert any(roles[s] == "saved" for s in part.saved if s in roles and roles[s] != "primal")
