"""ember-core's own plugin: the interpreter codegen and the log/dump observer."""

import torch
from ember_core import CompiledGraph, InterpreterCodegen, PluginManager, _builtin, interpreter_codegen
from ember_core.testing import battery_case


def test_interpreter_codegen_compiles_to_a_runnable_graph():
    case = battery_case("pointwise_chain")
    compiled = _builtin.InterpreterCodegen().compile(case.graph, case.inputs, {})
    assert isinstance(compiled, CompiledGraph) and compiled.codegen == "interpreter"
    assert compiled.source.startswith("def graph_pointwise_chain(inputs):")
    assert "# aten.mul.Tensor" in compiled.source
    torch.testing.assert_close(compiled(case.inputs), list(case.reference(*case.inputs)))


def test_builtin_registers_interpreter_for_every_device_at_lowest_priority():
    pm = PluginManager(load_entrypoints=False, env={})
    pm.register(_builtin, name="core")
    impl = pm.registry.find("codegen", device="cuda")
    assert (impl.name, impl.priority, impl.devices) == ("interpreter", -1000, ())


def test_interpreter_codegen_is_reached_without_any_registry():
    pm = PluginManager(load_entrypoints=False, env={"EMBER_DISABLE_PLUGINS": "core"})
    assert not pm.registry.has("codegen")
    case = battery_case("softmax")
    compiled = interpreter_codegen().compile(case.graph, None, {})
    assert isinstance(interpreter_codegen(), InterpreterCodegen) and compiled.codegen == "interpreter"
    torch.testing.assert_close(compiled(case.inputs), list(case.reference(*case.inputs)))


def test_interpreter_codegen_is_the_registered_object():
    pm = PluginManager(load_entrypoints=False, env={})
    pm.register(_builtin, name="core")
    assert pm.registry.find("codegen", "interpreter").impl is interpreter_codegen()
