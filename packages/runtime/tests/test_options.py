"""The runtime declares the options it reads (each option is declared by the package that reads it)."""

from ember_core import get_plugin_manager


def test_the_runtime_declares_the_pipeline_options_it_reads():
    declared = {s.key for s in get_plugin_manager().registry.options.values() if s.plugin == "runtime"}
    assert declared == {"frontend", "passes", "autograd", "partition", "codegen.cpu", "codegen.cuda", "cache", "dump",
                        "compiled_autograd", "freezing"}
