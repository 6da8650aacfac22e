"""The plugin manager and registry: discovery, choice by name and priority, and errors that name plugin and hook."""

import importlib.metadata

import ember_core as ec
import pytest
from ember_core import Event, OptionError, PluginError, PluginManager, hookimpl
from ember_core._builtin import InterpreterCodegen


def manager(**env) -> PluginManager:
    return PluginManager(load_entrypoints=False, env=env)


class Registers:
    """A test plugin that registers a codegen and an option."""

    def __init__(self, name="fast", priority=0, devices=("cpu",)):
        self.args = name, priority, devices

    @hookimpl
    def ember_register(self, registry):
        name, priority, devices = self.args
        registry.add("codegen", name, object(), priority=priority, devices=devices)


class Observer:
    def __init__(self):
        self.events, self.config = [], None

    @hookimpl
    def ember_event(self, event):
        self.events.append(event.kind)

    @hookimpl
    def ember_configure(self, config):
        self.config = dict(config)


# ---------------------------------------------------------------------------------------------- registry


def test_registered_implementation_is_found_by_name():
    pm = manager()
    pm.register(Registers("fast"), name="fastplug")
    impl = pm.registry.find("codegen", "fast")
    assert (impl.stage, impl.name, impl.plugin) == ("codegen", "fast", "fastplug")


def test_highest_priority_wins_without_a_name():
    pm = manager()
    pm.register(Registers("slow", priority=-5), name="a")
    pm.register(Registers("fast", priority=5), name="b")
    assert pm.registry.find("codegen").name == "fast"


def test_device_filters_the_choice():
    pm = manager()
    pm.register(Registers("gpu-only", priority=9, devices=("cuda",)), name="a")
    pm.register(Registers("cpu-only", devices=("cpu",)), name="b")
    assert pm.registry.find("codegen", device="cpu").name == "cpu-only"


def test_named_implementation_for_the_wrong_device_is_refused():
    pm = manager()
    pm.register(Registers("gpu-only", devices=("cuda",)), name="a")
    with pytest.raises(PluginError, match="codegen 'gpu-only' does not serve device 'cpu' \\(it serves cuda\\)"):
        pm.registry.find("codegen", "gpu-only", device="cpu")


def test_unknown_name_lists_what_is_installed():
    pm = manager()
    pm.register(Registers("fast"), name="a")
    with pytest.raises(PluginError, match="no codegen named 'cpp' is installed; known: fast"):
        pm.registry.find("codegen", "cpp")


def test_empty_stage_says_none_is_installed():
    with pytest.raises(PluginError, match="no partition is installed"):
        manager().registry.find("partition")


def test_unknown_stage_names_plugin_and_lists_stages():
    class Bad:
        @hookimpl
        def ember_register(self, registry):
            registry.add("optimiser", "x", object())

    with pytest.raises(PluginError, match="plugin 'bad': unknown stage 'optimiser'; stages are frontend, pass"):
        manager().register(Bad(), name="bad")


def test_duplicate_registration_names_both_plugins():
    pm = manager()
    pm.register(Registers("fast"), name="first")
    with pytest.raises(PluginError, match="plugin 'second': codegen 'fast' is already registered by 'first'"):
        pm.register(Registers("fast"), name="second")


def test_plugin_option_joins_the_option_table():
    class WithOption:
        @hookimpl
        def ember_register(self, registry):
            registry.add_option("fast.level", int, 2, "how fast")

    pm = manager()
    pm.register(WithOption(), name="opt")
    assert pm.registry.check_options({"fast.level": 3})["fast.level"] == 3
    assert pm.registry.options["fast.level"].plugin == "opt"


def test_plugin_option_cannot_redefine_another_plugins_option():
    class Clash:
        @hookimpl
        def ember_register(self, registry):
            registry.add_option("cache", bool, False, "mine")

    with pytest.raises(PluginError, match="plugin 'clash': option 'cache' is already defined by 'pipeline'"):
        with_options(manager()).register(Clash(), name="clash")


# ---------------------------------------------------------------------------------------------- options naming stages


class Stages:
    """A plugin with an implementation of each stage an option names."""

    @hookimpl
    def ember_register(self, registry):
        registry.add("frontend", "trace", object())
        registry.add("pass", "fold", object())
        registry.add("autograd", "aot", object())
        registry.add("partition", "mincut", object(), priority=10)
        registry.add("partition", "default", object())
        registry.add("codegen", "cpp", object(), devices=("cpu",))
        registry.add("codegen", "triton", object(), devices=("cuda", "cpu"))
        registry.add("codegen", "interpreter", object(), priority=-1000)


class PipelineOptions:
    """Options whose values name stages, declared as the package that reads them (the runtime) declares them."""

    @hookimpl
    def ember_register(self, registry):
        registry.add_option("frontend", str, "dynamo", "capture frontend", stage="frontend")
        registry.add_option("passes", (list, tuple), None, "graph pass ids", stage="pass")
        registry.add_option("autograd", str, None, "autograd", stage="autograd", also=("eager",))
        registry.add_option("partition", str, None, "partitioner", stage="partition")
        for device in ("cpu", "cuda"):
            registry.add_option(f"codegen.{device}", str, None, f"codegen for {device}", stage="codegen",
                                device=device)
        registry.add_option("cache", bool, True, "reuse compiled graphs")


def with_options(pm: PluginManager) -> PluginManager:
    pm.register(PipelineOptions(), name="pipeline")
    return pm


def staged(**env) -> PluginManager:
    pm = with_options(manager(**env))
    pm.register(Stages(), name="stages")
    return pm


def test_options_naming_installed_implementations_pass():
    registry = staged().registry
    given = {"frontend": "trace", "passes": ["fold"], "autograd": "aot", "partition": "default",
             "codegen.cpu": "cpp", "codegen.cuda": "interpreter"}
    assert registry.check_options(given).items() >= given.items()


def test_misspelled_partition_names_the_value_suggests_and_lists_the_installed():
    with pytest.raises(OptionError) as err:
        staged().registry.check_options({"partition": "mincutt"})
    assert str(err.value) == ("option 'partition': no partition named 'mincutt' is installed (did you mean "
                              "'mincut'?); valid names: mincut, default")


def test_a_name_far_from_every_one_is_listed_without_a_guess():
    with pytest.raises(OptionError, match=r"option 'frontend': no frontend named 'zzz' is installed; "
                                          r"valid names: trace"):
        staged().registry.check_options({"frontend": "zzz"})


def test_codegen_option_checks_the_device_it_serves():
    with pytest.raises(OptionError, match=r"option 'codegen.cuda': codegen 'cpp' does not serve device 'cuda' "
                                          r"\(it serves cpu\); codegens for cuda: triton, interpreter"):
        staged().registry.check_options({"codegen.cuda": "cpp"})


def test_autograd_accepts_eager_beside_the_installed_ones():
    registry = staged().registry
    assert registry.check_options({"autograd": "eager"})["autograd"] == "eager"
    with pytest.raises(OptionError, match=r"no autograd named 'eagre' is installed \(did you mean 'eager'\?\); "
                                          r"valid names: aot, eager"):
        registry.check_options({"autograd": "eagre"})


def test_each_pass_of_the_passes_option_is_checked():
    with pytest.raises(OptionError, match=r"option 'passes': no pass named 'fodl' is installed \(did you mean "
                                          r"'fold'\?\); valid names: fold"):
        staged().registry.check_options({"passes": ["fold", "fodl"]})


def test_unset_stage_options_are_not_checked():
    registry = with_options(manager()).registry  # no stage installed: the default 'dynamo' is the runtime's to find
    assert registry.check_options({"partition": None})["frontend"] == "dynamo"


def test_ember_options_naming_a_missing_stage_name_the_variable():
    pm = staged(EMBER_OPTIONS='{"codegen.cpu": "cppp"}')
    with pytest.raises(OptionError, match=r"^EMBER_OPTIONS: option 'codegen.cpu': no codegen named 'cppp' is "
                                          r"installed \(did you mean 'cpp'\?\); valid names: cpp, triton, interpreter"):
        pm.registry.check_options({"codegen.cpu": "cpp"}, pm.config["options"])


def test_plugin_option_can_name_a_stage_for_its_device():
    class Mps:
        @hookimpl
        def ember_register(self, registry):
            registry.add("codegen", "metal", object(), devices=("mps",))
            registry.add_option("codegen.mps", str, None, "codegen for MPS graphs", stage="codegen", device="mps")

    pm = staged()
    pm.register(Mps(), name="mps")
    assert pm.registry.check_options({"codegen.mps": "metal"})["codegen.mps"] == "metal"
    with pytest.raises(OptionError, match="codegen 'cpp' does not serve device 'mps'"):
        pm.registry.check_options({"codegen.mps": "cpp"})


# ---------------------------------------------------------------------------------------------- failures


def test_plugin_raising_in_ember_register_is_named_with_the_hook():
    class Broken:
        @hookimpl
        def ember_register(self, registry):
            raise ValueError("no licence")

    with pytest.raises(PluginError, match="plugin 'broken' raised in hook ember_register: ValueError: no licence"):
        manager().register(Broken(), name="broken")


def test_plugin_raising_in_ember_event_is_named_with_hook_and_event():
    class Broken:
        @hookimpl
        def ember_event(self, event):
            raise KeyError("x")

    pm = manager()
    pm.register(Broken(), name="noisy")
    with pytest.raises(PluginError, match=r"plugin 'noisy' raised in hook ember_event \(graph_captured\): KeyError"):
        pm.emit(Event("graph_captured", "capture"))


def test_misspelled_hook_fails_loudly_naming_plugin_and_hook():
    class Typo:
        @hookimpl
        def ember_regster(self, registry):
            pass

    with pytest.raises(PluginError, match=r"unknown hook 'ember_regster' in plugin .*ember's hooks are ember_"):
        manager().register(Typo(), name="typo")


def test_hook_with_wrong_arguments_names_plugin_and_hook():
    class WrongArgs:
        @hookimpl
        def ember_event(self, evt):
            pass

    with pytest.raises(PluginError, match=r"(?s)plugin 'wrong' does not fit ember's hooks: .*'ember_event'.*\{'evt'\}"):
        manager().register(WrongArgs(), name="wrong")


# ---------------------------------------------------------------------------------------------- environment


def test_disabled_plugin_is_not_registered():
    pm = manager(EMBER_DISABLE_PLUGINS="other, blocked")
    assert pm.register(Registers("fast"), name="blocked") is None
    assert not pm.registry.has("codegen") and pm.blocked == ("other", "blocked")


def test_disabled_entry_point_is_not_loaded():
    others = [ep.name for ep in importlib.metadata.entry_points(group="ember") if ep.name != "core"]
    pm = PluginManager(env={"EMBER_DISABLE_PLUGINS": ",".join(["core", *others])})
    assert not pm.registry.has("codegen") and pm.plugins() == []


def test_core_entry_point_registers_the_interpreter_codegen():
    others = [ep.name for ep in importlib.metadata.entry_points(group="ember") if ep.name != "core"]
    pm = PluginManager(env={"EMBER_DISABLE_PLUGINS": ",".join(others)})
    impl = pm.registry.find("codegen", "interpreter")
    assert isinstance(impl.impl, InterpreterCodegen) and impl.priority == -1000
    assert pm.plugins() == [("core", "ember-core", ec.__version__)]
    assert (impl.dist, impl.version) == ("ember-core", ec.__version__)


def test_trace_hooks_writes_a_line_per_hook_call(capsys):
    pm = manager(EMBER_TRACE_HOOKS="1")
    pm.register(Observer(), name="watcher")
    pm.register(Registers("fast"), name="fastplug")
    pm.emit(Event("cache_hit", "runtime", "hit"))
    err = capsys.readouterr().err
    assert "[ember hooks]   ember_configure [hook]" in err
    assert "[ember hooks]   ember_register plugin=fastplug [hook]" in err
    assert "[ember hooks]   ember_event plugin=watcher [hook]" in err
    assert "event: 'cache_hit (runtime) hit'" in err or "event: cache_hit (runtime) hit" in err  # pluggy 1.7 / 1.6


def test_no_trace_lines_without_the_knob(capsys):
    manager().register(Observer(), name="watcher")
    assert "[ember hooks]" not in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- events and config


def test_observers_get_every_event_in_registration_order():
    pm = manager()
    first, second = Observer(), Observer()
    pm.register(first, name="first")
    pm.register(second, name="second")
    pm.emit(Event("graph_captured", "capture"))
    pm.emit(Event("graph_compiled", "codegen"))
    assert first.events == second.events == ["graph_captured", "graph_compiled"] and pm.observed


def test_late_plugin_still_gets_the_configuration():
    pm = manager(EMBER_LOGS="graphs", EMBER_DUMP="/tmp/d")
    late = Observer()
    pm.register(late, name="late")
    assert late.config == {"logs": "graphs", "dump": "/tmp/d", "report": None, "options": {}}


def test_manager_without_observers_is_not_observed():
    assert not manager().observed


def test_process_manager_is_built_once_and_can_be_reset(monkeypatch):
    built = []
    monkeypatch.setattr(ec.plugins._plugins, "PluginManager", lambda: built.append(1) or object())
    ec.reset_plugin_manager()
    try:
        assert ec.get_plugin_manager() is ec.get_plugin_manager() and built == [1]
        ec.reset_plugin_manager()
        ec.get_plugin_manager()
        assert built == [1, 1]
    finally:
        ec.reset_plugin_manager()


def test_ember_options_environment_sets_defaults_under_the_calls_options():
    pm = staged(EMBER_OPTIONS='{"cache": false, "partition": "default"}')
    options = pm.registry.check_options({"partition": "mincut"}, pm.config["options"])
    assert options["cache"] is False and options["partition"] == "mincut"


def test_ember_options_that_are_not_json_name_the_variable():
    with pytest.raises(OptionError, match="EMBER_OPTIONS is not valid JSON"):
        PluginManager(load_entrypoints=False, env={"EMBER_OPTIONS": "{partition: default}"})


def test_ember_options_with_a_typo_name_the_variable_and_the_key():
    pm = with_options(PluginManager(load_entrypoints=False, env={"EMBER_OPTIONS": '{"cach": false}'}))
    with pytest.raises(OptionError, match=r"EMBER_OPTIONS: unknown option 'cach' \(did you mean 'cache'\?\)"):
        pm.registry.check_options({}, pm.config["options"])
