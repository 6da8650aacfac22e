"""ember-codegen-triton's tests run the kernels in Triton's interpreter on CPU tensors (`TRITON_INTERPRET=1`,
set before Triton is imported), with one private cache directory per session. Tests marked `gpu` run on CUDA."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-triton-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(Path(__file__).parent))
