"""ember-codegen-triton's tests run the kernels in Triton's interpreter on CPU tensors (`TRITON_INTERPRET=1`,
set before Triton is imported), with one private cache directory per session. Tests marked `gpu` run on CUDA."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-triton-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def builds_succeed(no_build_failures):
    """A Triton module that does not build sends the graph to the interpreter codegen: here that fails the test
    (ember-core's `no_build_failures`), unless the test is marked `allow_build_failure`."""
    yield
