"""What the `dynamo` frontend puts right in torch._dynamo before it traces.

Class constants. Some Dynamo releases (torch 2.11; pytorch#176851, fixed upstream by #177191) build a number, string
or enum read from a class (`Limits.LOW`, with `Limits` a global) as a constant without its source, so no guard
checks it: after `Limits.LOW = 0.5` the compiled function goes on computing with the old value, with no error and
no recompile (plain `torch.compile` too). `prepare_dynamo()` wraps the reader of class attributes so that such a
value is built again from its source, as Dynamo builds every other attribute, which guards it (a change recompiles,
as on later torch). Where Dynamo already gives the value its source, or the class itself has none, the wrapper
returns what Dynamo built: it detects the fault on each read, not by version.

`torch.addcdiv(x, t1, t2, value=v)`. Dynamo writes the call as `torch.div`, `torch.mul` and `torch.add` (so that
a `value` that is a tensor or a symbolic float needs no graph break). In float16 each of the three rounds its
result, where eager's kernel computes in float32 and rounds once: one ulp off eager, and further from the exact
result (ember keeps every float16 rounding a graph asks for). `prepare_dynamo()` puts a handler in front of
Dynamo's that leaves the call whole when `value` is a plain number, and hands any other call to Dynamo's. The
in-place methods `addcdiv_`/`addcmul_` with a value, which Dynamo writes as div (mul) and `prims.fma` (two
roundings: a quarter of 100,000 random float16 elements one ulp off eager), are kept whole the same way.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Callable
from typing import Any

from ember_core import wrap_once

log = logging.getLogger("ember.capture")
_MISSING = object()


def prepare_dynamo() -> None:
    """Install the fixes above into torch._dynamo, once per process (later calls change nothing). A torch without
    the classes they wrap keeps what it has."""
    try:  # the wrapper imports Dynamo's builders as it is made
        from torch._dynamo.variables.user_defined import UserDefinedClassVariable
        wrap_once(UserDefinedClassVariable, "var_getattr", _guarding_class_constants, "class-constants-guarded")
    except ImportError:
        return
    _keep_addcdiv_whole()
    from torch._dynamo.variables.tensor import TensorVariable
    for name in ("method_addcdiv_", "method_addcmul_"):
        if hasattr(TensorVariable, name):
            wrap_once(TensorVariable, name, _whole_with_a_number_value, "in-place-addc-whole")


def _whole_with_a_number_value(method: Callable) -> Callable:
    """Dynamo's rewrite of `x.addcdiv_(t1, t2, value=v)` (or addcmul_), declined (None: Dynamo records the call
    as it is) when `v` is a plain number."""
    def kept_whole(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        value = kwargs.get("value")
        if value is not None and value.is_python_constant() and _is_number(value.as_python_constant()):
            return None
        return method(self, tx, *args, **kwargs)
    return kept_whole


def _keep_addcdiv_whole() -> None:
    """Dynamo's special handlers are a dict built once (`TorchInGraphFunctionVariable._get_handlers()`, cached);
    its `torch.addcdiv` entry gets a front that declines (returns None: Dynamo then records the call as it is) for
    a number `value`. A torch without that table or entry changes nothing."""
    import torch
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    table = getattr(TorchInGraphFunctionVariable, "_get_handlers", None)
    handlers = table() if callable(table) else None
    decompose = handlers.get(torch.addcdiv) if isinstance(handlers, dict) else None
    if decompose is None or getattr(decompose, "_ember_whole", False):
        return

    def addcdiv(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        value = kwargs.get("value")
        if value is not None and value.is_python_constant() and _is_number(value.as_python_constant()):
            return None
        return decompose(self, tx, *args, **kwargs)

    addcdiv._ember_whole = True  # type: ignore[attr-defined]
    handlers[torch.addcdiv] = addcdiv
    log.debug("dynamo: torch.addcdiv with a number value is recorded whole")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _guarding_class_constants(read: Callable) -> Callable:
    from torch._dynamo import variables
    from torch._dynamo.source import AttrSource
    from torch._dynamo.variables import ConstantVariable, VariableTracker

    constants = (ConstantVariable, *filter(None, [getattr(variables, "EnumVariable", None)]))  # enums: 2.11

    def var_getattr(self: Any, tx: Any, name: str) -> Any:
        built = read(self, tx, name)
        if self.source is None or getattr(built, "source", None) is not None or not isinstance(built, constants):
            return built
        value = _class_constant(self.value, name)
        if value is _MISSING or value is not getattr(built, "value", _MISSING):
            return built  # not a constant of the class's own (a name Dynamo answers itself: `__name__`)
        return VariableTracker.build(tx, value, AttrSource(self.source, name))

    log.debug("dynamo: class constants are built from their source (guarded)")
    return var_getattr


def _class_constant(cls: type, name: str) -> Any:
    """The attribute `name` of `cls` as found without running any code, if it is a constant Dynamo builds without
    a source (a number, string, bool, None, or an enum member); else _MISSING."""
    if name in ("__name__", "__qualname__", "__module__", "__doc__"):
        return _MISSING
    try:
        value = inspect.getattr_static(cls, name)
    except AttributeError:
        return _MISSING
    literal = value is None or isinstance(value, (bool, int, float, complex, str, bytes, enum.Enum))
    return value if literal else _MISSING

