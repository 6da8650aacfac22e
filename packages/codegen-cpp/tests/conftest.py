"""ember-codegen-cpp's tests: one private cache directory per session, so builds are shared between tests
(each graph builds once) and nothing is left in the user's cache. `helpers.py` traces and compiles graphs."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-cpp-tests-")
atexit.register(shutil.rmtree, os.environ["EMBER_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(Path(__file__).parent))
