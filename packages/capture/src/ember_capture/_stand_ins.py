"""Stand-ins while a function is traced: the trace's values in place of the user's, seen by the tracing thread only.

make_fx runs the user's function on graph inputs (functional wrappers of fake tensors). The parameters and buffers of
the modules it reads, and the tensors it reads from globals, closure cells and containers, must be those inputs while
it runs; but they are the user's objects, and every other thread sees them. Writing the stand-ins into the modules and
globals (torch's `_reparametrize_module` does so) breaks an eager call of the same module in another thread
("Attempting to use FunctionalTensor on its own"), so nothing is written anywhere:

- `StandIns` is a `TorchFunctionMode`, and torch keeps its function modes per thread. In the tracing thread, every
  torch function, Tensor method and Tensor property getter gets each real tensor among its arguments (in lists,
  tuples and dicts too: an RNN's `_flat_weights`) replaced by its stand-in, matched by identity, so tied weights are
  one input. A result that is a stand-in itself (`buf.add_(1)` returns its first argument) is given back as the real
  tensor: Python code that keeps it (`self.buf += 1` assigns the result to the module) keeps what was there, and
  `buf.add_(1) is buf` stays true. The mode is entered inside the traced function, after make_fx's and
  functionalization's own modes, so it is the innermost: they see the stand-ins, never the user's tensors.
- A Python float cannot be intercepted that way (arithmetic on floats never reaches torch). A float global or closure
  cell that the frontend made a graph input reaches the trace through a copy of the function whose globals and cells
  hold the symbolic stand-in (`with_values`); the function itself, its module's globals and its cells are untouched.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_unflatten

_active = threading.local()  # per thread: the stack of `StandIns` entered


class StandIns(TorchFunctionMode):
    """Real tensors replaced by their stand-ins in every torch call of this thread while the mode is on."""

    def __init__(self, pairs: Iterable[tuple[torch.Tensor, Any]] = ()):
        super().__init__()
        self._by_real: dict[int, Any] = {}
        self._by_stand_in: dict[int, torch.Tensor] = {}
        self._held: list[tuple[torch.Tensor, Any]] = []  # both sides alive, so no id is reused while the mode lives
        for real, stand_in in pairs:
            self._by_real[id(real)] = stand_in
            self._by_stand_in[id(stand_in)] = real
            self._held.append((real, stand_in))

    def to_stand_ins(self, tree: Any) -> Any:
        """`tree` with each real tensor replaced by its stand-in."""
        return _swapped(tree, self._by_real)

    def to_reals(self, tree: Any) -> Any:
        """`tree` with each stand-in replaced by its real tensor."""
        return _swapped(tree, self._by_stand_in)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args, kwargs = self.to_stand_ins((args, kwargs or {}))
        return self.to_reals(func(*args, **kwargs))

    def __enter__(self) -> StandIns:
        stack = _active.__dict__.setdefault("stack", [])
        stack.append(self)
        try:
            return super().__enter__()
        except BaseException:
            stack.pop()
            raise

    def __exit__(self, *exc: Any) -> Any:
        try:
            return super().__exit__(*exc)
        finally:
            _active.stack.pop()


def to_stand_ins(tree: Any) -> Any:
    """`tree` with the stand-ins of this thread's innermost `StandIns` (unchanged when none is on): for calls that
    reach Python without passing through torch, `Function.apply` (see `_function_apply.py`)."""
    stack = getattr(_active, "stack", None)
    return stack[-1].to_stand_ins(tree) if stack else tree


def _swapped(tree: Any, table: Mapping[int, Any]) -> Any:
    if not table:
        return tree
    if isinstance(tree, torch.Tensor):
        return table.get(id(tree), tree)
    leaves, spec = tree_flatten(tree)
    if not any(id(leaf) in table for leaf in leaves):
        return tree  # the common case: nothing to swap, nothing rebuilt
    return tree_unflatten([table.get(id(leaf), leaf) for leaf in leaves], spec)


# ---------------------------------------------------------------------------------------------- floats


def function_of(fn: Callable) -> types.FunctionType | None:
    """The Python function `fn` calls first, when a copy of it can stand in for it: `fn` itself, a bound method's
    function, a `functools.partial`'s. None for anything else (a module, a callable object)."""
    if inspect.ismethod(fn):
        fn = fn.__func__
    elif isinstance(fn, functools.partial):
        fn = fn.func
    return fn if isinstance(fn, types.FunctionType) else None


def with_values(fn: Callable, globals_: Mapping[str, Any], cells: Mapping[int, Any]) -> Callable:
    """`fn` (see `function_of`) as a copy that reads `globals_[name]` for those global names and `cells[id(cell)]`
    for those closure cells, and everything else where `fn` reads it. The copy has a globals dict of its own (a copy
    of the module's, taken now), so a global the function assigns while traced is lost with it, never the user's."""
    target = function_of(fn)
    if target is None or not globals_ and not cells:
        return fn
    namespace = {**target.__globals__, **globals_}
    closure = tuple(types.CellType(cells[id(c)]) if id(c) in cells else c for c in target.__closure__ or ())
    copy = types.FunctionType(target.__code__, namespace, target.__name__, target.__defaults__, closure or None)
    copy.__kwdefaults__, copy.__qualname__ = target.__kwdefaults__, target.__qualname__
    copy.__dict__.update(target.__dict__)
    if inspect.ismethod(fn):
        return types.MethodType(copy, fn.__self__)
    if isinstance(fn, functools.partial):
        return functools.partial(copy, *fn.args, **fn.keywords)
    return copy
