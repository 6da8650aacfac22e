"""ember-core's pytest plugin: the `gpu` marker, skipped (and reported as skipped) without CUDA; the
`no_build_failures` fixture, failing a test whose generated code did not build."""

import pytest
from ember_core.testing import pytest_plugin

pytest_plugins = ["pytester"]


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


BUILD_FAILURES = """
import pytest
from ember_core import Event, emit


def fallback(cause):
    emit(Event("fallback", "codegen-test", "graph 'g': why", data={"reason": "why", "cause": cause}))


def test_build_failure():
    fallback("build")


@pytest.mark.allow_build_failure("breaks the build on purpose")
def test_build_failure_on_purpose():
    fallback("build")


def test_other_fallbacks():
    fallback("kernel")
    fallback("eager")
"""


def test_no_build_failures_fails_the_test_that_saw_one(pytester):
    pytester.makeconftest("""
import pytest


@pytest.fixture(autouse=True)
def builds_succeed(no_build_failures):
    yield
""")
    pytester.makepyfile(BUILD_FAILURES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_build_failure: a build failed*fallbacks by cause: build 1*"])


def test_without_the_fixture_a_build_failure_passes_unseen(pytester):
    pytester.makepyfile(BUILD_FAILURES)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)


LOST_CONTEXT = """
import os
from pathlib import Path


def test_a_kernel_writes_out_of_bounds():
    Path("first.pid").write_text(str(os.getpid()))
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_the_next_one_runs_in_a_fresh_process():
    assert Path("first.pid").read_text() != str(os.getpid())


def test_an_ordinary_failure_keeps_the_worker():
    Path("second.pid").write_text(str(os.getpid()))
    raise RuntimeError("CUDA out of memory")


def test_so_does_this_one():
    assert Path("second.pid").read_text() == str(os.getpid())
"""


def test_a_lost_cuda_context_ends_its_xdist_worker_after_the_test(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(LOST_CONTEXT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "1", "-p", "xdist", "-rA")
    # the test that lost the context is reported twice: its own failure, then xdist's "worker crashed"
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(["PASSED *test_the_next_one_runs_in_a_fresh_process"])
    result.stdout.fnmatch_lines(["*worker 'gw0' crashed while running*test_a_kernel_writes_out_of_bounds*"])


def test_sticky_cuda_errors_are_told_from_others():
    from ember_core.testing import cuda_context_lost

    try:
        try:
            raise RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")
        except RuntimeError as e:
            raise ValueError("the codegen raised") from e
    except ValueError as e:
        assert cuda_context_lost(e)
    assert not cuda_context_lost(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not cuda_context_lost(RuntimeError("illegal memory access"))  # not said by CUDA
