"""The frontend options ember-capture reads (torch.compile's meaning), with their defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULTS: dict[str, Any] = {"fullgraph": False, "dynamic": None, "mode": None, "recompile_limit": 8}


def options_of(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options with defaults filled in where missing or None (other keys pass through)."""
    given = {k: v for k, v in (options or {}).items() if v is not None}
    merged = {**DEFAULTS, **given}
    merged["fullgraph"] = bool(merged["fullgraph"])
    merged["recompile_limit"] = int(merged["recompile_limit"])
    return merged
