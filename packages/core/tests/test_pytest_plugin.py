"""ember-core's pytest plugin: the `gpu` marker, skipped (and reported as skipped) without CUDA."""

import pytest
from ember_core.testing import pytest_plugin


class Item:
    def __init__(self, *keywords):
        self.keywords, self.markers = set(keywords), []

    def add_marker(self, marker):
        self.markers.append(marker)


def test_plugin_is_loaded_by_entry_point_and_registers_the_marker(request):
    assert any(line.startswith("gpu:") for line in request.config.getini("markers"))


def test_gpu_items_are_skipped_without_cuda(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    gpu, cpu = Item("gpu"), Item()
    pytest_plugin.pytest_collection_modifyitems(None, [gpu, cpu])
    assert [m.kwargs["reason"] for m in gpu.markers] == ["needs a CUDA device"] and cpu.markers == []


def test_gpu_items_run_with_cuda(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    gpu = Item("gpu")
    pytest_plugin.pytest_collection_modifyitems(None, [gpu])
    assert gpu.markers == []


def test_plugin_manager_fixture_is_bare(ember_plugin_manager):
    assert ember_plugin_manager.plugins() == [] and not ember_plugin_manager.registry.has("codegen")


@pytest.mark.gpu
def test_gpu_marker_runs_only_with_cuda():
    import torch

    assert torch.cuda.is_available()
