"""The errors ember-codegen-cpp raises. None reaches a user: each has a fallback (see `_codegen.py`)."""

from __future__ import annotations

from ember_core import EmberError


class CannotPrint(Exception):
    """A kernel uses something the C++ printer does not handle; that kernel runs in the loop-IR interpreter."""


class BuildError(EmberError):
    """The compiler failed (or is missing); the message holds its command line and error output."""
