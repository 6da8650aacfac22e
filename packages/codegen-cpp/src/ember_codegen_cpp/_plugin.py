"""ember-codegen-cpp's plugin, found by entry point like any other: codegen `cpp`, the default for CPU."""

from __future__ import annotations

from ember_core import hookimpl

from ._codegen import CppCodegen


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "cpp", CppCodegen(), priority=100, devices=("cpu",))
