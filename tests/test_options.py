"""Options are checked when `ember.compile` is called, with every package installed: a misspelled stage name is an
`OptionError` naming the value, a guess and the valid names, never a failure at the first call."""

from __future__ import annotations

import os

import ember
import pytest
import torch
from ember_core import OptionError, reset_plugin_manager


def f(x):
    return (x.sin() * 2).sum()


@pytest.mark.parametrize("options, expected", [
    ({"partition": "mincutt"},
     "option 'partition': no partition named 'mincutt' is installed (did you mean 'mincut'?); "
     "valid names: mincut, default"),
    ({"codegen.cpu": "cppp"}, "option 'codegen.cpu': no codegen named 'cppp' is installed (did you mean 'cpp'?)"),
    ({"codegen.cuda": "cpp"}, "option 'codegen.cuda': codegen 'cpp' does not serve device 'cuda' (it serves cpu)"),
    ({"frontend": "dynamoo"}, "option 'frontend': no frontend named 'dynamoo' is installed (did you mean 'dynamo'?)"),
    ({"autograd": "aott"}, "option 'autograd': no autograd named 'aott' is installed (did you mean 'aot'?); "
                           "valid names: aot, eager"),
    ({"passes": ["fold-mul-on"]}, "option 'passes': no pass named 'fold-mul-on' is installed (did you mean "
                                  "'fold-mul-one'?)"),
    ({"partiton": "mincut"}, "unknown option 'partiton' (did you mean 'partition'?)"),
    ({"cache": "no"}, "option 'cache' must be bool, got str 'no'"),
    # a value of the right type out of its range: refused here, not inside the first call's BackendCompilerFailed
    ({"partition.memory_budget": 1.5}, "option 'partition.memory_budget' must be a number in (0, 1], not 1.5"),
    ({"partition.memory_budget": -3}, "option 'partition.memory_budget' must be a number in (0, 1], not -3"),
])
def test_a_bad_option_fails_at_compile_naming_it(options, expected):
    with pytest.raises(OptionError) as err:
        ember.compile(f, options=options)
    assert expected in str(err.value)


def test_torch_compile_reports_the_option_error_at_its_first_graph():
    compiled = torch.compile(f, backend="ember", options={"partition": "mincutt"})
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as err:
        compiled(torch.randn(3, requires_grad=True))
    assert isinstance(err.value.inner_exception, OptionError)
    assert "option 'partition': no partition named 'mincutt'" in str(err.value)


def test_ember_options_environment_is_checked_naming_the_variable(monkeypatch):
    monkeypatch.setenv("EMBER_OPTIONS", '{"partition": "defualt"}')
    reset_plugin_manager()
    try:
        with pytest.raises(OptionError, match=r"^EMBER_OPTIONS: option 'partition': no partition named 'defualt' is "
                                              r"installed \(did you mean 'default'\?\)"):
            ember.compile(f)
    finally:
        monkeypatch.delenv("EMBER_OPTIONS")
        reset_plugin_manager()


def test_valid_stage_names_compile_and_train_as_before():
    options = {"frontend": "trace", "partition": "default", "autograd": "aot", "codegen.cpu": "cpp",
               "codegen.cuda": "triton", "passes": ["fold-mul-one"]}
    x = torch.randn(5, requires_grad=True)
    ember.compile(f, options=options)(x).backward()
    expected = torch.autograd.grad(f(x), x)[0]
    torch.testing.assert_close(x.grad, expected)


def test_a_cpu_graph_sets_glibcs_malloc_thresholds_once_unless_the_process_chose():
    from ember_codegen_cpp import malloc_tuning
    from ember_codegen_cpp._malloc import _glibc, chosen_elsewhere
    f = ember.compile(lambda x: (x.sin() + 1).sum(1))
    x = torch.randn(4, 8)
    torch.testing.assert_close(f(x), (x.sin() + 1).sum(1))
    if _glibc() is not None and chosen_elsewhere(os.environ) is None:
        assert malloc_tuning().startswith("set glibc's malloc thresholds: mmap 32 MiB, trim 64 MiB")
    else:
        assert malloc_tuning().startswith("left glibc's malloc thresholds alone")
    with pytest.raises(OptionError, match="cpp.malloc"):
        ember.compile(lambda x: x + 1, options={"cpp.malloc": "jemalloc"})(x)
