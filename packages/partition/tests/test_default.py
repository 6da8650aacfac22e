"""The `default` partitioner: save every forward value the backward reads; recompute nothing."""

from ember_partition import DefaultPartitioner, analyze


def test_gradients_equal_the_joint_graph(block, block_name, decompose, check):
    traced = block(block_name, decompose)
    check(traced, DefaultPartitioner().partition(traced.joint))


def test_saves_exactly_the_forward_values_the_backward_reads(block):
    joint = block("gelu_mlp").joint
    info = analyze(joint)
    forward_values = {o for i in info.forward for o in info.graph.nodes[i].outputs} | set(info.primals)
    backward_reads = {r for i in info.needed - info.forward for r in info.reads[i]}
    assert set(DefaultPartitioner().partition(joint).saved) == forward_values & backward_reads


def test_recomputes_nothing(block, block_name):
    part = DefaultPartitioner().partition(block(block_name).joint)
    assert part.report.recomputed == ()
    assert not any(n.meta.get("recomputed") for n in part.backward.nodes)


def test_forward_graph_is_the_forward_region(block):
    joint = block("gpt_block").joint
    part = DefaultPartitioner().partition(joint)
    region = [n.outputs for n in joint.graph.nodes if n.meta["region"] == "forward"]
    assert [n.outputs for n in part.forward.nodes] == region
