"""The autograd conformance kit fails autograd plugins that break the contract (autograd's tests run it on
ember-autograd)."""

import pytest
from ember_core import Interpreter, JointGraph
from ember_core.testing import AutogradConformance, autograd_case, trace_joint


class Detaching:
    """A broken autograd: a correct joint graph (ember-core's reference tracer), but `wrap` runs the forward graph
    alone, so no output requires grad."""

    def joint(self, graph, example_inputs):
        run = Interpreter(graph).run
        kinds = [i.kind for i in graph.inputs]
        return trace_joint(lambda *xs: tuple(run(list(xs))), example_inputs, kinds, name=graph.name).joint

    def wrap(self, partition, forward, compile_backward):
        n = len(partition.forward.outputs) - len(partition.saved)
        return lambda inputs: forward([x.detach() for x in inputs])[:n]


class OffByOneLayout(Detaching):
    """A broken autograd: counts one forward output too few."""

    def joint(self, graph, example_inputs):
        joint = super().joint(graph, example_inputs)
        return JointGraph(joint.graph, joint.num_primals, joint.num_forward_outputs - 1)


class EagerBackward(Detaching):
    """A broken autograd: compiles the backward as soon as it wraps, whether or not a backward ever runs."""

    def wrap(self, partition, forward, compile_backward):
        compile_backward()
        return super().wrap(partition, forward, compile_backward)


def kit(autograd):
    return type("Kit", (AutogradConformance,), {"autograd": autograd})()


def test_kit_catches_outputs_that_lost_their_gradients():
    with pytest.raises(AssertionError, match=r"softmax \(input set 0\), output 0: requires_grad is False, eager's is"):
        kit(Detaching()).test_outputs_and_gradients_match_eager("softmax")


def test_kit_catches_a_joint_graph_of_the_wrong_layout():
    with pytest.raises(AssertionError, match="softmax: forward outputs .* are not the graph's outputs"):
        kit(OffByOneLayout()).test_joint_graph_keeps_the_layout("softmax")


def test_kit_catches_a_backward_compiled_before_it_is_needed():
    with pytest.raises(AssertionError, match="the backward was compiled before any backward ran"):
        kit(EagerBackward()).test_backward_is_compiled_once_on_first_use()


def test_kit_without_an_autograd_fails_clearly():
    with pytest.raises(pytest.fail.Exception, match="Kit.autograd is not set"):
        kit(None).test_joint_graph_keeps_the_layout("softmax")


def test_kit_cases_stamp_aliases_and_a_buffer_update():
    aliases, buffer = autograd_case("alias_outputs").graph, autograd_case("buffer_update").graph
    assert [(o.kind, o.input) for o in aliases.outputs] == [("alias", 0), ("user", None), ("alias", 0)]
    assert [i.mutated for i in buffer.inputs] == [False, False, True]
    assert [(o.kind, o.input) for o in buffer.outputs] == [("mutation", 2), ("user", None)]


class JointOnly:
    def joint(self, graph, example_inputs):
        return Detaching().joint(graph, example_inputs)


def test_kit_checks_the_protocol():
    with pytest.raises(AssertionError, match="JointOnly lacks joint"):
        kit(JointOnly()).test_implements_the_autograd_protocol()
