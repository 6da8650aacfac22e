"""ember-lowering's tests share `lowering_checks.py` (tracing, lowering with every check on, comparing with
ember-core's Interpreter); this makes it importable from tests/loop_passes/ too. The session has a disk cache of its
own, and each test starts with no cached plan (every graph is lowered)."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-lowering-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def lowered_afresh(cold_stage_caches):
    """No plan comes from an earlier test's (ember-core's `cold_stage_caches`), and every test draws the same random
    inputs whatever ran before it in its worker (as the integration tests do): an accuracy bound checked on random
    data is then checked on the same data every run."""
    torch.manual_seed(0)
    yield
