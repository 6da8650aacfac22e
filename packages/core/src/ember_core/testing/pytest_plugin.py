"""pytest plugin of ember-core: the `gpu` marker (skipped without CUDA) and fixtures for plugin tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped (and counted as skipped) without one")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def ember_plugin_manager():
    """A fresh ember plugin manager with no entry points loaded and an empty environment: register test plugins
    on it with `.register(obj, name=...)`."""
    from ember_core import PluginManager

    return PluginManager(load_entrypoints=False, env={})
