"""Functionalization of a flat function, and the facts about its inputs and outputs that only it can see.

`functionalized(fn, facts)` runs `fn` on `FunctionalTensor` wrappers (torch's Python functionalization), so the
ops that reach make_fx underneath are functional: an in-place op on an input becomes a functional op plus a new
value, returned as an extra output. While the wrappers still exist, it records in `facts`:
- which outputs share storage with an input (a view of it, or the input itself): `aliases`;
- which inputs were written: `mutated`;
- eager autograd's view of each output and mutated input (`requires_grad`), which the ATen graph underneath
  cannot see (autograd sits above functionalization);
- whether grad mode was on for each op that reached the graph (`GradModeRecorder`), so no_grad regions survive;
  for an op with an autograd formula of its own (a `torch.library.custom_op` with `register_autograd`), the grad
  mode where it was called (`CallSiteGradMode`), not the no_grad its formula runs its forward under.

Effectful ops reach the graph as themselves, not threaded through effect tokens (`ember_core.EffectfulFunctionalMode`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ember_core import EffectfulFunctionalMode, is_custom_function
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ._errors import CaptureError


@dataclass
class TraceFacts:
    """What functionalization saw. Indices are positions in the flat inputs and outputs."""

    aliases: list[int | None] = field(default_factory=list)  # per user output: the input it aliases
    layouts: list[tuple | None] = field(default_factory=list)  # per user output: (size, stride, offset) of a view
    out_requires_grad: list[bool] = field(default_factory=list)  # per user output, as eager autograd has it
    mutated: list[int] = field(default_factory=list)  # inputs written, in input order
    mutated_requires_grad: list[bool] = field(default_factory=list)  # per mutated input, after the call
    grad_enabled: bool = True  # grad mode when the function was entered


class CallSiteGradMode(TorchFunctionMode):
    """The grad mode where each op outside ATen was called, seen above autograd (`at_call[op]`, a stack).

    An op with an autograd formula of its own (a `custom_op` with `register_autograd`) runs its forward inside
    an autograd.Function, under no_grad: below autograd it looks like an op called in a no_grad region, and the
    no-grad detaches would cut the gradient its formula gives. Its node is stamped with the mode at its call."""

    def __init__(self) -> None:
        super().__init__()
        self.at_call: dict[Any, list[bool]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not isinstance(func, torch._ops.OpOverload) or func.namespace in ("aten", "prims"):
            return func(*args, **(kwargs or {}))
        stack = self.at_call.setdefault(func, [])
        stack.append(torch.is_grad_enabled())
        try:
            return func(*args, **(kwargs or {}))
        finally:
            stack.pop()


class GradModeRecorder(TorchDispatchMode):
    """Stamps every fx node made while an op runs with the grad mode it ran under (`meta["ember_grad"]`).

    A custom function call (`ember.custom_function`) reaches this mode from inside the autograd node that makes
    its outputs require grad, where grad mode is off; but it is only ever recorded for a call that needs a
    gradient, so it is stamped as grad-on: nothing may detach it. An op outside ATen that `call_site` saw called
    gets the grad mode of its call."""

    def __init__(self, call_site: CallSiteGradMode) -> None:
        super().__init__()
        self.call_site = call_site

    def _grad_mode(self, func: Any) -> bool:
        if is_custom_function(func):
            return True
        at_call = self.call_site.at_call.get(func)
        return at_call[-1] if at_call else torch.is_grad_enabled()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        mode = get_proxy_mode()
        graph = mode.tracer.graph if mode is not None else None
        last = graph._root.prev if graph is not None else None
        out = func(*args, **(kwargs or {}))
        if graph is not None:
            grad, node = self._grad_mode(func), last.next
            while node is not graph._root:
                node.meta.setdefault("ember_grad", grad)
                node = node.next
        return out


class _NoGradInplaceCheck(TorchDispatchMode):
    """Refuses an in-place op under no_grad on a tensor autograd computed (`norm.clamp_min_(eps)` inside
    `cosine_similarity`). Eager keeps that tensor's place in the autograd graph, so its gradient flows through the
    op as if it were not there; in the functional graph the op is a new value made under no_grad, which the
    detaches cut off: the gradient would be silently wrong. The function runs eagerly instead (CaptureError).
    Updating a leaf (a parameter, an optimizer's state) under no_grad is fine: it is an input's mutation."""

    inputs: set[int] = set()  # the function's inputs (and so their views) may be updated: input mutations

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if target is not None and not torch.is_grad_enabled() and target.requires_grad and \
                target.grad_fn is not None and id(target) not in self.inputs and \
                id(getattr(target, "_base", None)) not in self.inputs and _writes_self(func):
            raise CaptureError(f"{func} updates in place, under no_grad, a tensor that autograd computed (eager lets "
                               "its gradient pass through the update; a graph cannot say that)")
        return func(*args, **(kwargs or {}))


def _writes_self(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return info is not None and info.is_write


def _to_functional(x: Any) -> Any:
    return FunctionalTensor.to_functional(x) if isinstance(x, torch.Tensor) else x


def _from_functional(x: Any) -> Any:
    if not isinstance(x, FunctionalTensor):
        return x
    torch._sync(x)
    return torch._from_functional_tensor(x.elem)


def _check_metadata_kept(before: torch.Tensor, after: torch.Tensor, index: int) -> None:
    layout = (lambda t: (t.shape, t.stride(), t.storage_offset()))
    if layout(before) != layout(after):
        raise CaptureError(f"input {index} has its shape or strides changed in place (resize_, t_, as_strided_ ...); "
                           "metadata mutations of inputs are not supported")


def functionalized(fn: Callable[..., Sequence[Any]], facts: TraceFacts) -> Callable[..., list]:
    """`fn` made functional. It returns its outputs (`fn` returns a tensor or a flat sequence), then the new value
    of each mutated input."""

    def run(*args: Any) -> list:
        facts.grad_enabled = torch.is_grad_enabled()
        check = _NoGradInplaceCheck()
        call_site = CallSiteGradMode()
        with call_site, GradModeRecorder(call_site), EffectfulFunctionalMode(), check:
            f_args = [_to_functional(a) for a in args]
            check.inputs = {id(a) for a in f_args if isinstance(a, torch.Tensor)}
            result = fn(*f_args)
            outs = [result] if isinstance(result, torch.Tensor) else list(result)
        storages: dict[StorageWeakRef, int] = {}
        for i, a in enumerate(f_args):
            if isinstance(a, torch.Tensor):
                storages.setdefault(StorageWeakRef(a.untyped_storage()), i)
        for o in outs:
            is_tensor = isinstance(o, torch.Tensor)
            facts.aliases.append(storages.get(StorageWeakRef(o.untyped_storage())) if is_tensor else None)
            facts.layouts.append((tuple(o.shape), tuple(o.stride()), o.storage_offset()) if is_tensor else None)
            facts.out_requires_grad.append(bool(is_tensor and o.requires_grad))
        new_values = []
        for i, (a, f) in enumerate(zip(args, f_args)):
            if not isinstance(f, FunctionalTensor):
                continue
            _check_metadata_kept(a, f, i)
            if torch._functionalize_has_data_mutation(f.elem):
                facts.mutated.append(i)
                facts.mutated_requires_grad.append(bool(f.requires_grad))
                new_values.append(_from_functional(f))
        return [_from_functional(o) for o in outs] + new_values

    return run
