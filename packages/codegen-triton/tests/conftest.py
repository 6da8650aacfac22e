"""ember-codegen-triton's tests run the kernels in Triton's interpreter on CPU tensors (`TRITON_INTERPRET=1`, set
before Triton is imported, unless the environment says otherwise), with one private cache directory per session.

Tests marked `gpu` run compiled kernels on CUDA, whatever the environment says. Triton reads `TRITON_INTERPRET` once
per process (its own library functions are built as it loads), so the choice is made before collection: a run that
selects only gpu tests (`pytest -m gpu`) sets `TRITON_INTERPRET=0`; a run that mixes them with the CPU tests keeps
the interpreter and skips the gpu tests, saying why (on a machine without CUDA ember-core's plugin skips them
anyway)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-triton-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(Path(__file__).parent))


def selects_only_gpu_tests(markexpr: str) -> bool:
    """Whether a `-m` expression keeps a test marked `gpu` alone and drops every test without that mark (whatever
    other marks it has)."""
    if not markexpr.strip():
        return False
    try:
        from _pytest.mark.expression import Expression

        expr = Expression.compile(markexpr)
        return expr.evaluate(lambda name, **_: name == "gpu") and not expr.evaluate(lambda name, **_: name != "gpu")
    except Exception:  # noqa: BLE001 - pytest's private parser moved: read the common spelling only
        return markexpr.strip() == "gpu"


def pytest_configure(config: pytest.Config) -> None:
    if selects_only_gpu_tests(config.getoption("markexpr", "") or ""):
        os.environ["TRITON_INTERPRET"] = "0"
    else:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") or not torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="Triton's interpreter is on in this process (TRITON_INTERPRET=1, for the CPU "
                                   "tests): run gpu tests alone, `pytest -m gpu`, to compile them for the GPU")
    here = Path(__file__).parent
    for item in items:
        if "gpu" in item.keywords and here in item.path.parents:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def builds_succeed(no_build_failures):
    """A Triton module that does not build sends the graph to the interpreter codegen: here that fails the test
    (ember-core's `no_build_failures`), unless the test is marked `allow_build_failure`. Every test draws the same
    random inputs whatever ran before it in its worker."""
    torch.manual_seed(0)
    yield
