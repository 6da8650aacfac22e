"""Functionalization of a flat function, and the facts about its inputs and outputs that only it can see.

`functionalized(fn, facts)` runs `fn` on `FunctionalTensor` wrappers (torch's Python functionalization), so the
ops that reach make_fx underneath are functional: an in-place op on an input becomes a functional op plus a new
value, returned as an extra output. While the wrappers still exist, it records in `facts`:
- which outputs share storage with an input (a view of it, or the input itself): `aliases`;
- which inputs were written: `mutated`;
- eager autograd's view of each output and mutated input (`requires_grad`), which the ATen graph underneath
  cannot see (autograd sits above functionalization);
- whether grad mode was on for each op that reached the graph (`GradModeRecorder`), so no_grad regions survive;
  a tensor detached in place (`detach_`) is read through an explicit `detach` (`InPlaceDetaches`);
  for an op with an autograd formula of its own (a `torch.library.custom_op` with `register_autograd`), the grad
  mode where it was called (`CallSiteGradMode`), not the no_grad its formula runs its forward under.
It refuses what the functional graph would compute otherwise than eager: writes autograd does not see into tensors
that require grad (`_HiddenWriteCheck`), in-place random ops on tensors that are not contiguous, writes eager
refuses for their memory overlap, higher-order ops (control flow, flex_attention: `_Uncapturable`), and a backward with
create_graph=True run inside when what the function returns needs a gradient (the graph's derivative would miss the
saved values' paths).

Effectful ops reach the graph as themselves, not threaded through effect tokens (`ember_core.EffectfulFunctionalMode`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ember_core import EffectfulFunctionalMode, is_custom_function, is_random
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from ._errors import CaptureError, HigherOrderOpRefused
from ._overlap import storage_of, write_overlap
from ._rnn import LstmStateShapes


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


class InPlaceDetaches(TorchFunctionMode):
    """`t.detach_()` on a tensor autograd computed: every later read of `t` reads `aten.detach(t)`.

    Below autograd `detach_` is a plain `detach` whose result nothing reads (functionalization has no value to
    replace), so the graph would read `t` itself and its gradient would flow where eager's stops. Seen here, above
    autograd, each later call gets `t.detach()` in its place: the graph holds the detach, and capture's grad facts
    stop there. A view taken before the `detach_` keeps its gradient, as in eager. Detaching an input that requires
    grad in place changes the caller's tensor, which a graph cannot do: CaptureError (the function runs eagerly)."""

    def __init__(self, check: _HiddenWriteCheck) -> None:
        super().__init__()
        self.detached: dict[int, torch.Tensor] = {}  # id → the tensor detached in place (kept alive: ids stay unique)
        self.check = check  # knows the inputs; told each call's outputs (which require grad is known only up here)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.detach_ and args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            target = args[0]
            if target.grad_fn is None or id(target) in self.check.inputs:
                raise CaptureError("detach_() on an input that requires grad changes the caller's tensor; "
                                   "detach a copy (`x = x.detach()`) instead")
            result = func(*args, **kwargs)
            self.detached[id(target)] = target
            return result
        if self.detached:
            args, kwargs = tree_map(self._read, (args, kwargs))
        result = func(*args, **kwargs)
        self.check.saw(result)
        return result

    def _read(self, x: Any) -> Any:
        return x.detach() if isinstance(x, torch.Tensor) and self.detached.get(id(x)) is x else x


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


class _HiddenWriteCheck(TorchDispatchMode):
    """Refuses what a functional graph would differentiate otherwise than eager: a write that autograd does not
    record (under no_grad, or with no operand that requires grad: `t.detach().mul_(2)`, `p.data.clamp_()`) into the
    storage of a tensor that requires grad.

    Eager keeps that tensor's place in the autograd graph: its later readers differentiate through it as if the
    write were not there, and its new value is what they read. In the functional graph the new value is a fresh
    value computed where grad is off, so detaches cut it off: a silently wrong gradient. Where the tensor itself
    is written under no_grad and autograd computed it (`norm.clamp_min_(eps)` inside `cosine_similarity`) the write
    is refused; otherwise (an input such as a parameter updated by an optimizer step, a tensor written through a
    detached alias) a later read of it where grad is on is: an update after the last such read is a mutation like
    any other. The function then runs eagerly (CaptureError). Storages are what tensors share: a view, `detach()`
    and `.data` all write the same one. A fresh tensor filled in place (a dropout mask, a padded copy) requires no
    grad when written, so nothing is refused for it.

    `grad_storages` holds the storages of the tensors that require grad: the inputs, then every output the
    above-autograd mode (`InPlaceDetaches`) sees come back requiring grad."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: set[int] = set()  # ids of the function's (functional) inputs
        self._input_storages: set[StorageWeakRef] = set()
        self.grad_storages: set[StorageWeakRef] = set()
        self._written: set[StorageWeakRef] = set()  # storages of grad tensors written where autograd did not see it

    def watch(self, inputs: Sequence[Any]) -> None:
        tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
        self.inputs = {id(a) for a in tensors}
        self._input_storages = {storage_of(a) for a in tensors}
        self.grad_storages = {storage_of(a) for a in tensors if a.requires_grad}

    def saw(self, result: Any) -> None:
        """Outputs of a call above autograd: those that require grad name their storage."""
        self.grad_storages.update(storage_of(t) for t in tree_leaves(result)
                                  if isinstance(t, torch.Tensor) and t.requires_grad)
        self.grad_storages.discard(None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        grad = torch.is_grad_enabled()
        tensors = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        target = args[0] if args and isinstance(args[0], torch.Tensor) and _writes_self(func) else None
        if target is not None and (not grad or not any(a.requires_grad for a in tensors)):
            storage = storage_of(target)
            if target.requires_grad and not grad and storage not in self._input_storages:
                raise CaptureError(f"{func} updates in place, under no_grad, a tensor that autograd computed (eager "
                                   "lets its gradient pass through the update; a graph cannot say that)")
            if storage is not None and (target.requires_grad or storage in self.grad_storages):
                self._written.add(storage)
        if grad and self._written:
            for a in tensors:
                if a is not target and a.requires_grad and storage_of(a) in self._written:
                    raise CaptureError(f"{func} reads, where grad is on, a tensor that requires grad after it was "
                                       "updated in place under no_grad or through a detached alias (eager's "
                                       "gradient treats the new value as the tensor itself; a graph cannot say that)")
        return func(*args, **(kwargs or {}))


class _Uncapturable(TorchDispatchMode):
    """Refuses what reaches dispatch that a functional ATen graph cannot hold as eager runs it (CaptureError: the
    function then runs eagerly, visibly):

    - an in-place random op (`normal_`, `bernoulli_`, `uniform_` ...) on a tensor that is not contiguous. Random ops
      are kept whole so that a seeded run draws eager's numbers, and ATen's kernels choose how to draw by the
      tensor's layout: `normal_` fills a contiguous tensor in vectorized blocks and any other one element by element
      in memory order. Functionalization draws into a fresh tensor instead (a contiguous copy of a view with gaps;
      `bernoulli.p`'s result is always contiguous), so on a tensor that is not contiguous the graph would draw other
      numbers than eager from the same seed (`w[:, 1:].normal_()`, `x.t().bernoulli_(p)`). A contiguous tensor, an
      input's or a fresh one's, draws alike in both;
    - a higher-order op that reaches dispatch: control flow (`torch.cond`, `while_loop`, `map`) and
      `flex_attention`, whose branches and bodies are subgraphs a graph of ATen ops has no place for. Without this,
      dispatch raised its own NotImplementedError out of the compile (checkpointing and `nested_compile_region`
      never get here: their bodies are traced inline);
    - a write that eager refuses for its memory overlap (`write_overlap`): into a tensor that holds an element twice
      (`x[:2].expand(3, 2).add_(1)`), or over part of another operand's memory (`x[1:].add_(x[:-1])`, `x.add_(x[0])`).
      The functional graph reads every operand before it writes, so it returned numbers where eager raised; the
      function now runs eagerly and raises eager's error;
    - (noted here, refused by `functionalized` when an output requires grad) an op of a backward the function runs
      with create_graph=True (a gradient penalty, a physics-informed residual, `torch.func.grad`: a backward started
      inside the trace, with grad mode on). Autograd hands the backward's formulas their saved values through
      `detach`, so the graph holds the right gradients but not how they depend on those values, and
      differentiating the graph again gave wrong second derivatives, silently. A graph whose outputs need no
      gradient is never differentiated, and a backward without create_graph (a training step compiled whole) runs
      with grad mode off: both are captured.

    It also notes whether the function makes a negated or conjugated view (`sign_views`): the graph computes such a
    view's values (`ember_core.sign_bit_values`), so an output that eager returns as a view of an input through one
    cannot be rebuilt as a view of the caller's tensor (`functionalized` refuses it)."""

    supports_higher_order_operators = True
    _SIGN_VIEWS = (torch.ops.aten._neg_view.default, torch.ops.aten._conj.default)

    def __init__(self) -> None:
        super().__init__()
        self.sign_views = False
        self.backward = torch._C._current_graph_task_id()  # -1, or the backward this trace itself runs inside
        self.differentiable_backward = False  # an op ran in a backward the function started with create_graph=True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.is_grad_enabled() and torch._C._current_graph_task_id() != self.backward:
            self.differentiable_backward = True
        if func in self._SIGN_VIEWS:
            self.sign_views = True
        if isinstance(func, torch._ops.HigherOrderOperator):
            raise HigherOrderOpRefused(f"the higher-order op {func.name()} (control flow or a subgraph: torch.cond, "
                                       "while_loop, map, flex_attention) cannot be captured as one graph")
        overlap = write_overlap(func, args, kwargs or {})
        if overlap is not None:
            raise CaptureError(f"{func} {overlap}; a functional graph reads every operand before it writes and "
                               "writes each element once (memory overlap)")
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if target is not None and _writes_self(func) and is_random(func) and not target.is_contiguous():
            raise CaptureError(f"{func} draws in place into a tensor that is not contiguous (shape "
                               f"{tuple(target.shape)}, strides {tuple(target.stride())}); eager draws its numbers "
                               "in that layout's order, a functional graph into a fresh tensor: other numbers from "
                               "the same seed")
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


def _made_leaf(outs: Sequence[Any], inputs: Sequence[Any]) -> bool:
    """Does an output's autograd history reach a leaf that is no input: a tensor made to require grad inside the
    function (`x.detach().requires_grad_()`, `z.requires_grad = True`)? Eager accumulates the gradient into that
    very tensor; a graph has no leaf of its own (its output would not even require grad)."""
    known = {id(x) for x in inputs if isinstance(x, torch.Tensor)}
    stack = []
    for o in outs:
        if isinstance(o, torch.Tensor) and o.requires_grad:
            if o.grad_fn is None and id(o) not in known:
                return True
            stack.append(o.grad_fn)
    seen = set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node's tensor
        if leaf is not None and id(leaf) not in known:
            return True
        stack.extend(n for n, _ in node.next_functions)
    return False


def functionalized(fn: Callable[..., Sequence[Any]], facts: TraceFacts) -> Callable[..., list]:
    """`fn` made functional. It returns its outputs (`fn` returns a tensor or a flat sequence), then the new value
    of each mutated input."""

    def run(*args: Any) -> list:
        facts.grad_enabled = torch.is_grad_enabled()
        check = _HiddenWriteCheck()
        call_site = CallSiteGradMode()
        detaches = InPlaceDetaches(check)
        uncapturable = _Uncapturable()
        with LstmStateShapes(), call_site, detaches, GradModeRecorder(call_site), EffectfulFunctionalMode(), check, \
                uncapturable:
            f_args = [_to_functional(a) for a in args]
            check.watch(f_args)
            result = fn(*f_args)
            outs = [result] if isinstance(result, torch.Tensor) else list(result)
        if _made_leaf(outs, [*args, *f_args]):
            raise CaptureError("a tensor computed inside the function is made a leaf that requires grad "
                               "(requires_grad_(), requires_grad = True): a graph cannot hold the tensor eager "
                               "accumulates its gradient into")
        storages: dict[StorageWeakRef, int] = {}
        for i, a in enumerate(f_args):
            if isinstance(a, torch.Tensor):
                storages.setdefault(StorageWeakRef(a.untyped_storage()), i)
        for o in outs:
            is_tensor = isinstance(o, torch.Tensor)
            facts.aliases.append(storages.get(StorageWeakRef(o.untyped_storage())) if is_tensor else None)
            facts.layouts.append((tuple(o.shape), tuple(o.stride()), o.storage_offset()) if is_tensor else None)
            facts.out_requires_grad.append(bool(is_tensor and o.requires_grad))
        if uncapturable.sign_views and any(a is not None for a in facts.aliases):
            raise CaptureError("the function returns a view of an input and makes a negated or conjugated view "
                               "(conj(), .imag of a conjugate): such a view cannot be rebuilt on the caller's tensor")
        new_values = []
        for i, (a, f) in enumerate(zip(args, f_args)):
            if not isinstance(f, FunctionalTensor):
                continue
            _check_metadata_kept(a, f, i)
            if torch._functionalize_has_data_mutation(f.elem):
                facts.mutated.append(i)
                facts.mutated_requires_grad.append(bool(f.requires_grad))
                new_values.append(_from_functional(f))
        if uncapturable.differentiable_backward and any(facts.out_requires_grad + facts.mutated_requires_grad):
            raise CaptureError("the function runs a backward with create_graph=True (torch.autograd.grad, "
                               "torch.func.grad) and what it returns needs a gradient: the backward's ops read their "
                               "saved values through autograd's detach, so the graph's own derivative would miss "
                               "every path through them")
        return [_from_functional(o) for o in outs] + new_values

    return run
