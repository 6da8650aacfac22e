"""The errors ember-lowering raises. Each names the kernel or node and the broken rule."""

from __future__ import annotations

from ember_core import EmberError


class LoweringError(EmberError):
    """A graph could not be lowered (a rule met arguments it cannot express). The message names the node."""


class PlanError(EmberError):
    """A KernelPlan breaks a rule of the loop IR, or its text does not parse. The message shows it in context."""


class Unsupported(Exception):
    """Raised by a lowering rule for arguments it does not handle; the node then becomes an extern call."""
