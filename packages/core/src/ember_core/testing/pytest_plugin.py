"""pytest plugin of ember-core: the `gpu` marker (skipped without CUDA), deprecation warnings out of ember's code
made errors, fixtures for plugin tests, `no_build_failures`, which fails a test whose generated code did not build,
and `cold_stage_caches`, which makes every stage run in each test.

A test that loses its process's CUDA context (a kernel's illegal memory access, a device-side assert: errors
CUDA reports again at every later call) ends its pytest-xdist worker once its report is out, so that xdist starts
a fresh one for the tests after it: on the H100 of 2026-12-06, one bad kernel in each worker turned 77 tests after
it into errors at their first CUDA call, hiding which ones failed on their own. Without xdist the session goes on
as before."""

from __future__ import annotations

import os
import sys

import pytest

_RECORDER = pytest.StashKey()
_LOST = pytest.StashKey()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped (and counted as skipped) without one")
    config.addinivalue_line("markers", "allow_build_failure(reason): the test breaks a codegen's build on purpose; "
                                       "the no_build_failures fixture lets it pass")
    # a deprecated torch API that ember calls warns the user at every compile and breaks on the next torch: such a
    # warning attributed to an ember module (the warning's stacklevel points at its caller) fails the test
    for category in ("DeprecationWarning", "FutureWarning"):
        config.addinivalue_line("filterwarnings", f"error::{category}:ember")


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


@pytest.fixture
def no_build_failures(request: pytest.FixtureRequest):
    """Records the `fallback` events of the test (a `FallbackRecorder`); the test fails when one says a build
    failed, unless it is marked `allow_build_failure`. Make it autouse in a conftest:

        @pytest.fixture(autouse=True)
        def builds_succeed(no_build_failures):
            yield
    """
    from ember_core.testing import FallbackRecorder

    with FallbackRecorder() as recorder:
        request.node.stash[_RECORDER] = recorder
        yield recorder
    del request.node.stash[_RECORDER]


@pytest.fixture
def cold_stage_caches():
    """Empties the disk caches of stage results (`ember_core.clear_result_caches`: the runtime's partitions,
    lowering's plans) before the test, so that every stage runs and sends its events as in a first process,
    whatever earlier tests compiled; the codegens' build caches are kept. It empties the current cache root:
    make it autouse in a conftest that points EMBER_CACHE_DIR at a directory of the test session's own."""
    from ember_core import clear_result_caches

    clear_result_caches()
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A build failure of a test using `no_build_failures` fails the test itself (not its teardown)."""
    result = yield
    recorder = item.stash.get(_RECORDER, None)
    if recorder is not None and item.get_closest_marker("allow_build_failure") is None:
        recorder.check(item.nodeid)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.excinfo is not None:
        from ember_core.testing import cuda_context_lost

        if cuda_context_lost(call.excinfo.value):
            item.stash[_LOST] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """After a test whose CUDA context was lost has reported, its xdist worker exits (xdist starts another)."""
    result = yield
    if item.stash.get(_LOST, False) and hasattr(item.config, "workerinput"):
        print(f"ember: {item.nodeid} lost this process's CUDA context; the worker exits so that the next tests "
              "run in a fresh one", file=sys.stderr, flush=True)
        os._exit(3)
    return result
