"""What both partitioners share: the split, the report, verified graphs; on the corner cases of real code."""

import pytest
import torch
from ember_partition import DefaultPartitioner, MinCutPartitioner

CORNERS = {
    "gradient_is_the_tangent": (lambda x: x + 1, [(4, 3, True)]),
    "input_without_grad": (lambda x, w: x.sin() * w, [(4, 3, False), (3, True)]),
    "integer_output": (lambda x: (x.relu(), x.argmax(dim=1)), [(4, 3, True)]),
    "output_the_backward_reads": (lambda x: x.exp(), [(4, 3, True)]),
    "matmul_of_primals": (lambda x, w: x @ w, [(4, 3, True), (3, 5, True)]),
    "two_outputs": (lambda x: (x.sin(), x.cos() * 2), [(4, 3, True)]),
    "view_of_input_in_the_output": (lambda x: x.t().sin(), [(4, 3, True)]),
    "unused_input": (lambda x, w: x.tanh(), [(4, 3, True), (3, True)]),
    "norm_is_the_output": (lambda x, w, b: torch.nn.functional.layer_norm(x, (3,), w, b), [(4, 3, True), (3, True),
                                                                                         (3, True)]),
    "norm_output_read_twice": (lambda x, w: torch.nn.functional.layer_norm(x, (3,), w) ** 2, [(4, 3, True), (3, True)]),
}


@pytest.mark.parametrize("partitioner", [DefaultPartitioner(), MinCutPartitioner(1.0), MinCutPartitioner(0.5)],
                         ids=["default", "mincut-1.0", "mincut-0.5"])
@pytest.mark.parametrize("corner", list(CORNERS))
def test_corner_cases_match_the_joint_graph(trace, check, partitioner, corner):
    fn, specs = CORNERS[corner]
    primals = [torch.randn(*spec[:-1], requires_grad=spec[-1]) for spec in specs]
    traced = trace(fn, primals)
    check(traced, partitioner.partition(traced.joint))


def test_matmul_of_primals_saves_no_activations(trace):
    traced = trace(lambda x, w: x @ w, [torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)])
    for partitioner in (DefaultPartitioner(), MinCutPartitioner()):
        assert partitioner.partition(traced.joint).report.saved_bytes == 0


def test_graphs_name_their_producer_and_part(block):
    part = MinCutPartitioner().partition(block("cos_cos").joint)
    assert (part.forward.name, part.backward.name) == ("cos_cos_forward", "cos_cos_backward")
    assert part.forward.producer == "ember-partition 0.1.0 (mincut)"
