from __future__ import annotations

import pytest
import torch
from ember_core import OptionError, PluginError
from ember_runtime import CompiledModule, clear_cache, compile, record_events


def f(x):
    return torch.relu(x) * 2 + 1


def test_disable_returns_the_callable_unchanged():
    assert compile(f, disable=True) is f


def test_unknown_mode_is_an_error_listing_the_modes():
    with pytest.raises(OptionError, match="unknown mode 'fastest'.*'reduce-overhead'"):
        compile(f, mode="fastest")


def test_option_typo_names_the_key_and_suggests_the_close_one(toy):
    with pytest.raises(OptionError, match=r"unknown option 'frontnd' \(did you mean 'frontend'\?\).*valid options"):
        compile(f, options={"frontnd": "toy"})


def test_option_of_the_wrong_type_is_an_error(toy):
    with pytest.raises(OptionError, match="option 'cache' must be bool"):
        compile(f, options={"frontend": "toy", "cache": "yes"})


def test_compiled_function_matches_eager(toy, x):
    compiled = compile(f, options={"frontend": "toy"})
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.__name__ == "f"


def test_works_as_a_decorator(toy, x):
    @compile(options={"frontend": "toy"})
    def g(x):
        return x.sin()

    torch.testing.assert_close(g(x), x.sin())


def test_module_keeps_its_attributes(toy, x):
    model = torch.nn.Linear(8, 3)
    compiled = compile(model, options={"frontend": "toy"})
    assert isinstance(compiled, CompiledModule)
    assert compiled.weight is model.weight
    torch.testing.assert_close(compiled(x), model(x))


def test_same_graph_twice_compiles_once(toy, x):
    clear_cache()
    compiled = compile(f, options={"frontend": "toy"})
    with record_events() as rec:
        compiled(x)
        compiled(x)
    assert len(rec.kinds("graph_compiled")) == 1
    assert len([e for e in rec.kinds("graph_cache_hit") if e.stage == "runtime"]) == 1


def test_cache_off_compiles_every_time(toy, x):
    compiled = compile(f, options={"frontend": "toy", "cache": False})
    with record_events() as rec:
        compiled(x)
        compiled(x)
    assert len(rec.kinds("graph_compiled")) == 2


def test_unknown_codegen_is_an_error_at_compile_naming_it(toy):
    with pytest.raises(OptionError, match="option 'codegen.cpu': no codegen named 'nope' is installed; valid names: "
                                          ".*interpreter"):
        compile(f, options={"frontend": "toy", "codegen.cpu": "nope"})


def test_unknown_frontend_is_an_error_naming_it(toy):
    with pytest.raises(OptionError, match=r"option 'frontend': no frontend named 'toyy' is installed \(did you mean "
                                          r"'toy'\?\)"):
        compile(f, options={"frontend": "toyy"})


def test_misspelled_stage_is_an_error_at_compile_even_when_the_stage_would_not_run(toy):
    with pytest.raises(OptionError, match=r"no partition named 'mincutt' is installed"):
        compile(f, options={"frontend": "toy", "partition": "mincutt"})


def test_dynamo_backend_checks_options_before_compiling(toy, x):
    from ember_runtime import dynamo_backend

    gm = torch.fx.symbolic_trace(f)
    with pytest.raises(OptionError, match=r"option 'codegen.cpu': no codegen named 'interpretr' is installed "
                                          r"\(did you mean 'interpreter'\?\)"):
        dynamo_backend(gm, [x], options={"codegen.cpu": "interpretr"})


def test_other_backends_go_to_torch_compile(x):
    compiled = compile(f, backend="eager")
    torch.testing.assert_close(compiled(x), f(x))


def test_dynamo_backend_needs_a_frontend_that_declares_backend(toy, x, monkeypatch):
    from ember_runtime import Pipeline, dynamo_backend

    monkeypatch.setattr(Pipeline, "frontend", lambda self, name=None: toy.frontend)  # a frontend with wrap() only
    gm = torch.fx.symbolic_trace(f)
    with pytest.raises(PluginError, match=r"frontend 'dynamo' .* has no backend\(compile_graph, options\)"):
        dynamo_backend(gm, [x])
