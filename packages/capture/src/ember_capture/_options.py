"""The options ember-capture owns, and the torch.compile arguments its frontends read.

`OPTIONS` is the one table of capture's options: the plugin registers each with the registry (so `ember.compile`
checks and defaults them, and `ember plugins --options` lists them), and `options_of` fills the same defaults
when a frontend is called directly with a partial dict (tests, tools). `fullgraph` and `dynamic` are not options
but `ember.compile`'s arguments, which the runtime passes to the frontend beside the options; a direct caller that
leaves them out gets torch.compile's meaning (no fullgraph, dynamic decided by the frontend).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember_core import OptionSpec

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("recompile_limit", int, 8, "entries per function before a frontend stops compiling it and runs it "
               "eagerly (the trace frontend's guard entries; Dynamo's recompile limit)", "ember-capture"),
)
CALL_ARGUMENTS: dict[str, Any] = {"fullgraph": False, "dynamic": None}  # torch.compile's meaning when left out


def register_options(registry: Any) -> None:
    for spec in OPTIONS:
        registry.add_option(spec.key, spec.type, spec.default, spec.doc)


def options_of(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options with capture's defaults filled in where missing or None (other keys pass through)."""
    given = {k: v for k, v in (options or {}).items() if v is not None}
    merged = {**CALL_ARGUMENTS, **{s.key: s.default for s in OPTIONS}, **given}
    merged["fullgraph"] = bool(merged["fullgraph"])
    merged["recompile_limit"] = int(merged["recompile_limit"])
    return merged
