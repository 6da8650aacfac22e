"""The errors ember-capture raises, and how it names the user's source line that caused one."""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from types import TracebackType

import ember_core
import torch

_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(__file__)
_EFFECTS_FILE = os.path.abspath(sys.modules[ember_core.EffectfulFunctionalMode.__module__].__file__ or "")


class CaptureError(ember_core.EmberError):
    """A function cannot be captured as one graph. `where` is `file.py:12`, `code` that line's text, if known."""

    def __init__(self, reason: str, where: str | None = None, code: str | None = None):
        self.reason, self.where, self.code = reason, where, code
        text = reason if where is None else f"{where}: {reason}"
        super().__init__(text + (f"\n    {code}" if code else ""))


class HigherOrderOpRefused(CaptureError):
    """A higher-order op (torch.cond ...) reached the capture's dispatch: see `_functionalize._Uncapturable`."""


def is_torch_file(path: str) -> bool:
    """Is `path` inside torch or ember-capture, or ember-core's functionalization mode (not the user's code)?"""
    path = os.path.abspath(path)
    return path.startswith(_TORCH_DIR) or path.startswith(_OWN_DIR) or path == _EFFECTS_FILE


def user_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The innermost frame of a traceback that is neither torch's nor ember-capture's: the user's line."""
    found = None
    for frame in traceback.extract_tb(tb):
        if not (is_torch_file(frame.filename) or frame.filename.startswith("<")):
            found = frame
    return found


def located(reason: str, exc: BaseException) -> CaptureError:
    """A `CaptureError` for `exc`, naming the user's line that raised it (file:line and the code text)."""
    frame = user_frame(exc.__traceback__)
    if frame is None:
        return CaptureError(reason)
    code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return CaptureError(reason, f"{frame.filename}:{frame.lineno}", code or None)
