"""Stage contracts: runtime-checkable Protocols and the records stages exchange."""

from ember_core import CompiledGraph, Graph, JointGraph, Partition
from ember_core._builtin import InterpreterCodegen
from ember_core.plugins._stages import STAGES, Autograd, Codegen, Frontend, GraphPass, Partitioner


def test_compiled_graph_calls_its_function_with_the_inputs():
    compiled = CompiledGraph(lambda inputs: [sum(inputs)], Graph(), "test")
    assert compiled([1, 2]) == [3]


def test_interpreter_codegen_satisfies_the_codegen_protocol():
    assert isinstance(InterpreterCodegen(), Codegen)


def test_protocols_check_the_method_each_stage_needs():
    class Dce:
        id = "dce"

        def run(self, graph):
            return graph

    assert isinstance(Dce(), GraphPass) and not isinstance(Dce(), Partitioner)
    assert not isinstance(object(), (Frontend, Autograd, Codegen))


def test_joint_graph_and_partition_hold_graphs():
    joint = JointGraph(Graph(), num_primals=2, num_forward_outputs=1)
    part = Partition(Graph(name="fw"), Graph(name="bw"), saved=("s",))
    assert joint.num_primals == 2 and part.saved == ("s",) and part.extra == {}


def test_stage_names_are_the_registry_stages():
    assert STAGES == ("frontend", "pass", "autograd", "partition", "codegen")
