"""ember's stand-in for the `expecttest` package, put on the path by `./dev gpu` (tools/gpu_check.py) only where
the real one is not installed, as on the bare GPU machines.

torch's OpInfo database (`torch.testing._internal.common_methods_invocations`, which tests/opinfo reads) imports
`torch.testing._internal.common_utils`, whose `TestCase` derives from `expecttest.TestCase` and which reads
`expecttest.ACCEPT`. ember's OpInfo sweep only reads the database and never runs an expect test, so a plain
`unittest.TestCase` serves; an expect assertion, if anything called one, fails saying why.
"""

from __future__ import annotations

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def _no_expect_tests(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("expect tests need the real expecttest package; this is ember's stand-in "
                                  "(tools/shims/expecttest.py), which only lets torch's OpInfo database import")

    assertExpected = assertExpectedInline = assertExpectedRaisesInline = _no_expect_tests
