"""ember-lowering's tests share `lowering_checks.py` (tracing, lowering with every check on, comparing with
ember-core's Interpreter); this makes it importable from tests/passes/ too."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
