"""The entry point registers codegen `cpp`, the default for CPU graphs."""

from __future__ import annotations

from ember_codegen_cpp import CppCodegen
from ember_core import get_plugin_manager


def test_cpp_is_the_default_cpu_codegen():
    impl = get_plugin_manager().registry.find("codegen", device="cpu")
    assert impl.name == "cpp" and isinstance(impl.impl, CppCodegen)
    assert impl.devices == ("cpu",) and impl.dist == "ember-codegen-cpp"


def test_cpp_does_not_serve_cuda():
    fits = [i.name for i in get_plugin_manager().registry.all("codegen") if not i.devices or "cuda" in i.devices]
    assert "cpp" not in fits
