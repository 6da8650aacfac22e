"""The failures a codegen built on this layer has. None reaches a user but `ExternDtypeError`, which stops a call
that would otherwise read an extern's bytes as the wrong type."""

from __future__ import annotations

from ember_core import EmberError


class CannotPrint(Exception):
    """A kernel uses something the codegen's printer does not handle: that kernel runs in the loop-IR
    interpreter (or, raised for the plan as a whole, the graph runs in ember-core's interpreter codegen)."""


class BuildError(EmberError):
    """Making a kernel binary failed (a compiler error, a missing compiler); the message says how."""


class BindError(Exception):
    """A verified build that cannot be bound (a library that does not load, or lacks a function it must export):
    its cache entry is discarded and the build made again, once (see `LazyBinding`)."""


class ExternDtypeError(EmberError, RuntimeError):
    """An extern call returned another dtype than the kernel plan says (see `wrong_dtype` in `_fallback.py`)."""
