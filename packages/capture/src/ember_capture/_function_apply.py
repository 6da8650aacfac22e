"""`Function.apply` while ember traces Python: a custom autograd function becomes an `ember.custom_function` call.

The trace frontend runs the user's Python under make_fx, so it meets `MyFunction.apply(x)` itself (Dynamo's graphs
hold `autograd_function_apply` instead, see `_aten.py`). `apply` reaches no torch function mode, so torch offers no
per-thread way in: while any thread captures a graph, `intercepting_functions` puts a replacement of
`torch.autograd.Function.apply` in place whose effect is per thread. In the capturing thread, a call that needs a
gradient is traced as a forward and a backward (`traced_body`) and handed to the graph's `CustomFunctions`; any
other call, and every call in other threads, is the original `apply`, with the same arguments and result. The
replacement is installed by the first capture and the original put back by the last, under a lock.

The original is called as `cls.apply` would find it: through its descriptor's `__get__(None, cls)`, which binds a
`classmethod` (torch 2.11 to 2.13) and a `classmethod_descriptor` (torch 2.14, written in C, without `__func__`)
alike. No version is named anywhere. In the capturing thread the call's tensors are first swapped for the trace's
stand-ins (`_stand_ins.to_stand_ins`): `Function.apply` is no torch function, so the trace's `StandIns` mode does not
see a parameter passed to it.

The forward and backward run with a stand-in ctx (`_TracedCtx`) that records what the author's code tells it:
`save_for_backward`, `mark_non_differentiable`, `mark_dirty` (refused), `set_materialize_grads`, and tensors or sizes
kept on ctx as attributes, all of which become saved values the backward's trace reads as inputs.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.autograd.function import Function, FunctionCtx, _is_setup_context_defined
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._custom_functions import CustomFunctions, FunctionBody, needs_gradient
from ._errors import CaptureError
from ._patches import SharedPatch, anchor_stack_traces
from ._stand_ins import to_stand_ins

_CTX_FIELDS = frozenset({"to_save", "non_differentiable", "dirty_tensors", "materialize_grads", "needs_input_grad",
                         "saved_for_forward", "_saved"})


class _TracedCtx(FunctionCtx):
    """The ctx a custom function's forward and backward see while ember traces them."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self._saved: tuple[Any, ...] = ()

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self._saved

    saved_variables = saved_tensors


def _is_saved_leaf(x: Any) -> bool:
    return isinstance(x, (torch.Tensor, torch.SymInt))


class _CtxState:
    """What the forward left on ctx that the backward reads: the saved tensors and ctx attributes, flattened; their
    tensor and size leaves are the values the backward's trace takes as inputs."""

    def __init__(self, ctx: _TracedCtx):
        self.attrs = {k: v for k, v in vars(ctx).items() if k not in _CTX_FIELDS}
        self.leaves, self.spec = tree_flatten((tuple(getattr(ctx, "to_save", ())), self.attrs))
        self.slots = [k for k, leaf in enumerate(self.leaves) if _is_saved_leaf(leaf)]

    def saved(self) -> list[Any]:
        return [self.leaves[k] for k in self.slots]

    def ctx_for_backward(self, needs_input_grad: tuple[bool, ...], saved: Sequence[Any]) -> _TracedCtx:
        leaves = list(self.leaves)
        for k, value in zip(self.slots, saved):
            leaves[k] = value
        to_save, attrs = tree_unflatten(leaves, self.spec)
        ctx = _TracedCtx(needs_input_grad)
        vars(ctx).update(attrs)
        ctx._saved = tuple(to_save)
        return ctx


def traced_body(cls: type, args: Sequence[Any]) -> tuple[FunctionBody, list[Any]]:
    """`cls`'s forward and backward in the form `CustomFunctions.call` takes, for a call on `args`, and the
    operands of the call: its tensors and symbolic sizes. Other arguments (Python numbers, flags, objects) stay
    constants of the traced forward, as the function sees them."""
    needs_input_grad = tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    positions = [i for i, a in enumerate(args) if isinstance(a, (torch.Tensor, torch.SymInt))]
    name = cls.__name__
    state: dict[str, Any] = {}
    anchor_stack_traces(cls.backward)

    def forward(*operands: Any) -> tuple[Any, list[Any]]:
        call_args = list(args)
        for i, value in zip(positions, operands):
            call_args[i] = value
        ctx = _TracedCtx(needs_input_grad)
        outputs = _run_forward(cls, ctx, call_args)
        if getattr(ctx, "dirty_tensors", None):
            raise CaptureError(f"custom autograd function {name} writes its input in place (mark_dirty), which "
                               "ember cannot hold in a graph")
        flat = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        marked = getattr(ctx, "non_differentiable", ())
        state["non_differentiable"] = [j for j, o in enumerate(flat) if any(o is m for m in marked)]
        state["ctx"] = _CtxState(ctx)
        return outputs, state["ctx"].saved()

    def backward(tangents: Sequence[Any], saved: Sequence[Any]) -> list[Any]:
        ctx = state["ctx"].ctx_for_backward(needs_input_grad, saved)
        grads = cls.backward(ctx, *tangents)
        grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
        if len(grads) < len(args) or any(g is not None for g in grads[len(args):]):
            raise CaptureError(f"custom autograd function {name}: backward returned an incorrect number of "
                               f"gradients (expected {len(args)}, got {len(grads)})")
        return [grads[i] for i in positions]

    body = FunctionBody(name, forward, backward, lambda: state["non_differentiable"], _arg_names(cls, positions))
    return body, [args[i] for i in positions]


def _arg_names(cls: type, positions: Sequence[int]) -> list[str]:
    """The forward's parameter names at the operands' positions (its ctx parameter skipped), where it has them."""
    try:
        params = [p.name for p in inspect.signature(cls.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []
    params = params if _is_setup_context_defined(cls.setup_context) else params[1:]
    return [params[i] if i < len(params) else f"arg{i}" for i in positions]


def _run_forward(cls: type, ctx: _TracedCtx, args: Sequence[Any]) -> Any:
    if _is_setup_context_defined(cls.setup_context):
        outputs = cls.forward(*args)
        cls.setup_context(ctx, tuple(args), outputs)
        return outputs
    return cls.forward(ctx, *args)


def _bound_arguments(cls: type, args: tuple, kwargs: dict) -> tuple:
    """The call's arguments, positional, as `Function.apply` binds them (defaults filled for new-style functions)."""
    if _is_setup_context_defined(cls.setup_context):
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    if kwargs:
        raise CaptureError(f"custom autograd function {cls.__name__} is called with keyword arguments "
                           f"({', '.join(kwargs)}), which ember cannot trace")
    return tuple(args)


# ---------------------------------------------------------------------------------------------- the replacement


class _Interception:
    """The per-thread stack of graphs being captured, and the replacement of `Function.apply` (a `SharedPatch`)."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.patch = SharedPatch([(Function, "apply")], lambda k, original: classmethod(self.apply))

    def active(self) -> CustomFunctions | None:
        stack = getattr(self.local, "stack", None)
        return stack[-1] if stack else None

    def apply(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        custom = self.active()
        if custom is not None:
            args, kwargs = to_stand_ins((args, kwargs))
        if custom is None or not needs_gradient(args) and not needs_gradient(tuple(kwargs.values())):
            return _bound(self.patch.originals[0], cls)(*args, **kwargs)
        body, operands = traced_body(cls, _bound_arguments(cls, args, kwargs))
        return custom.call(body, operands)

    @contextlib.contextmanager
    def __call__(self, custom: CustomFunctions) -> Iterator[None]:
        with self.patch.hold():
            stack = self.local.__dict__.setdefault("stack", [])
            stack.append(custom)
            try:
                yield
            finally:
                stack.pop()


def _bound(descriptor: Any, cls: type) -> Any:
    """What `cls.apply` is when `descriptor` is `Function.__dict__["apply"]`: the attribute lookup's own binding."""
    get = getattr(type(descriptor), "__get__", None)
    return descriptor if get is None else get(descriptor, None, cls)


intercepting_functions = _Interception()
