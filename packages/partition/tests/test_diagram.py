"""Diagrams of joint graphs: DOT text coloured by forward, backward, saved and recomputed; SVG when possible."""

import sys

from ember_partition import MinCutPartitioner, joint_diagram, render_svg, write_diagram
from ember_partition._diagram import COLOURS


def test_every_role_has_its_colour(block):
    joint = block("gelu_mlp").joint
    text = joint_diagram(joint, MinCutPartitioner().partition(joint))
    assert text.startswith('digraph "gelu_mlp" {') and text.rstrip().endswith("}")
    for role in ("forward", "backward", "saved", "recomputed", "primal", "tangent"):
        assert f'fillcolor="{COLOURS[role]}"' in text, role
    assert "legend" in text


def test_one_box_per_node_and_one_arrow_per_read(block):
    joint = block("cos_cos").joint
    text = joint_diagram(joint)
    assert text.count(" [fillcolor=") == len(joint.graph.nodes)
    assert text.count("shape=ellipse") == len(joint.graph.inputs)
    assert "i0 -> n0;" in text  # cos reads the primal


def test_without_a_partition_regions_colour_the_nodes(block):
    text = joint_diagram(block("cos_cos").joint)
    assert COLOURS["backward"] in text and COLOURS["recomputed"] not in text.split("legend")[-1].split("];", 1)[1]


def test_write_diagram_writes_dot_and_svg_when_renderable(block, tmp_path, monkeypatch):
    joint = block("cos_cos").joint
    monkeypatch.setattr("ember_partition._diagram.render_svg", lambda text: "<svg/>")
    files = write_diagram(tmp_path / "joint.svg", joint)
    assert [f.name for f in files] == ["joint.dot", "joint.svg"]
    assert files[0].read_text() == joint_diagram(joint) and files[1].read_text() == "<svg/>"


def test_without_graphviz_only_dot_is_written(block, tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setitem(sys.modules, "graphviz", None)
    assert render_svg("digraph g {}") is None
    assert [f.name for f in write_diagram(tmp_path / "j", block("cos_cos").joint)] == ["j.dot"]


def test_recomputed_nodes_the_joint_lacks_are_drawn_too(block):
    joint = block("layernorm_attention").joint
    part = MinCutPartitioner().partition(joint)
    text = joint_diagram(joint, part)
    chain = [n for n in part.backward.nodes if "renormalizes" in n.meta]
    assert chain and all(f'"{n.outputs[0]}\\n' in text for n in chain)
