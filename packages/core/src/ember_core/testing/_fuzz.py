"""Shared pieces of ember's fuzz tests: Hypothesis settings sized by the environment, payload strings that would
run code if anything evaluated them, and the canary those payloads set.

`EMBER_FUZZ_EXAMPLES` sets the cases per test (CI's default is a few hundred; `nox -s fuzz` runs thousands);
`EMBER_FUZZ_SEED` unset keeps the cases the same run to run, any value draws fresh ones. Hypothesis is imported
only when `fuzz_settings` is called, so plugins that never fuzz need not install it.
"""

from __future__ import annotations

import builtins
import os
from typing import Any

CANARY = "EMBER_CANARY"
_SET_CANARY = f"__import__('builtins').setattr(__import__('builtins'), '{CANARY}', 1)"

# Text that runs code under eval/exec/sympify, in an f-string, or through str.format; then text that breaks limits.
PAYLOADS: tuple[str, ...] = (
    _SET_CANARY,
    "{" + _SET_CANARY + "}",
    "{0.__class__.__init__.__globals__}",
    "exec(" + repr(_SET_CANARY) + ")",
    "torch.__class__.__init__",
    "10**10**10",
    "(" * 2000 + "s0" + ")" * 2000,
    "9" * 5000,
)


def fuzz_examples(default: int = 300) -> int:
    return int(os.environ.get("EMBER_FUZZ_EXAMPLES", default))


def fuzz_settings(default_examples: int = 300, **overrides: Any) -> Any:
    """Hypothesis settings for a fuzz test: no per-case deadline (tests bound time themselves), no health checks
    that flag slow or large inputs (those are the point), reproducible unless `EMBER_FUZZ_SEED` is set."""
    from hypothesis import HealthCheck, settings

    return settings(max_examples=fuzz_examples(default_examples), deadline=None,
                    derandomize=os.environ.get("EMBER_FUZZ_SEED") is None,
                    suppress_health_check=list(HealthCheck), **overrides)


def assert_no_code_ran() -> None:
    """Fails if any payload was evaluated: they all set the canary attribute on `builtins`."""
    assert not hasattr(builtins, CANARY), "input text was run as code (the fuzz canary is set)"
