"""Events go to `ember_event` observers with stage `capture`; functions are named readably."""

from __future__ import annotations

import torch
from ember_capture._report import qualname, report


def test_report_emits_a_capture_event(events):
    report("fallback", "f runs eagerly", function="f")
    (event,) = events.of("fallback")
    assert (event.stage, event.message, event.data, event.artifact) == ("capture", "f runs eagerly", {"function": "f"},
                                                                        "recompiles")


def test_qualname_of_functions_methods_and_modules():
    def local():
        pass

    model = torch.nn.Linear(1, 1)
    assert [qualname(local), qualname(model.forward), qualname(model)] == ["local", "Linear.forward", "Linear"]
