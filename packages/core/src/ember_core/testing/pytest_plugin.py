"""pytest plugin of ember-core: the `gpu` marker (skipped without CUDA), deprecation warnings out of ember's code
made errors, fixtures for plugin tests, `no_build_failures`, which fails a test whose generated code did not build,
and `cold_stage_caches`, which makes every stage run in each test."""

from __future__ import annotations

import pytest

_RECORDER = pytest.StashKey()


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
