"""Frontend options: torch.compile's defaults fill what is missing or None; other keys pass through."""

from __future__ import annotations

from ember_capture._options import options_of


def test_defaults_fill_missing_and_none_values():
    assert options_of(None) == {"fullgraph": False, "dynamic": None, "mode": None, "recompile_limit": 8}
    opts = options_of({"fullgraph": 1, "recompile_limit": None, "dynamic": False, "codegen.cpu": "cpp"})
    assert opts["fullgraph"] is True and opts["recompile_limit"] == 8 and opts["dynamic"] is False
    assert opts["codegen.cpu"] == "cpp"
