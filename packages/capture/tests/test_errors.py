"""CaptureError names the user's line: file:line and the code text, skipping torch's own frames."""

from __future__ import annotations

import ember_core
import torch
from ember_capture import CaptureError
from ember_capture._errors import located


def test_located_error_names_the_users_line():
    try:
        torch.ones(2).view(3)  # the line to name
    except RuntimeError as e:
        error = located("bad view", e)
    assert isinstance(error, ember_core.EmberError)
    assert error.where.startswith(__file__) and error.code == "torch.ones(2).view(3)  # the line to name"
    assert str(error).splitlines()[0].endswith(": bad view")


def test_error_without_a_user_frame_has_only_the_reason():
    assert str(CaptureError("no graph")) == "no graph"
