"""ember-codegen-cpp's tests: one private cache directory per session, so builds are shared between tests
(each graph builds once) and nothing is left in the user's cache; a build failure fails the test that saw it.
`helpers.py` traces and compiles graphs."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-cpp-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def builds_succeed(no_build_failures):
    """A graph whose C++ does not build runs in the interpreter codegen, correct and slow: here that fails the
    test (ember-core's `no_build_failures`), unless the test is marked `allow_build_failure`. Every test draws the
    same random inputs whatever ran before it in its worker (a bf16 result checked at a tolerance is then checked
    on the same data every run)."""
    torch.manual_seed(0)
    yield
