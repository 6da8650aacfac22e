"""How the trace frontend rebuilds a function's return value from its graph's outputs (`OutputLayout`)."""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._errors import CaptureError
from ._runner import GraphRunner

_TRACED = (FakeTensor, FunctionalTensor, torch.SymInt, torch.SymFloat, torch.SymBool)


class OutputLayout:
    """How the function's return value is rebuilt from the graph's outputs: its pytree and its constant leaves."""

    def __init__(self) -> None:
        self.spec: Any = None
        self.graph_leaves: list[int] = []  # positions of the leaves the graph computes
        self.template: list[Any] = []  # the other leaves, traced as Python constants

    def record(self, result: Any) -> list:
        leaves, self.spec = tree_flatten(result)
        self.template = list(leaves)
        for p, v in enumerate(leaves):
            if isinstance(v, torch.Tensor) or (isinstance(v, torch.SymInt) and not v.node.expr.is_number):
                self.graph_leaves.append(p)
                self.template[p] = None
            elif isinstance(v, torch.SymInt):
                self.template[p] = int(v)
            elif isinstance(v, (torch.SymFloat, torch.SymBool)):
                raise CaptureError(f"the function returns a symbolic {type(v).__name__} that depends on sizes")
            elif _holds_traced_values(v):
                raise CaptureError(f"the function returns a {type(v).__name__} holding a tensor it computes, which "
                                   "the trace cannot put back: it rebuilds tuples, lists, dicts and namedtuples "
                                   "(register the class with torch.utils._pytree to compile it)")
        return [leaves[p] for p in self.graph_leaves]

    def caller(self, runner: GraphRunner, inputs: Callable[[list], list]) -> Callable[[list], Any]:
        """`run(flat)`: the graph called on `inputs(flat)`, its outputs put back in the function's return value."""
        spec, positions, template = self.spec, self.graph_leaves, self.template
        if positions == [0] and len(template) == 1 and spec.is_leaf():
            return lambda flat: runner(inputs(flat))[0]

        sizes = _has_sizes(spec)

        def run(flat: list) -> Any:
            outs = runner(inputs(flat))
            result = template.copy()
            for p, v in zip(positions, outs):
                result[p] = v
            value = tree_unflatten(result, spec)
            return _sizes_back(value, spec) if sizes else value

        return run


def _has_sizes(spec: Any) -> bool:
    return spec.type is torch.Size or any(_has_sizes(c) for c in spec.children())


def _sizes_back(value: Any, spec: Any) -> Any:
    """`value` with every `torch.Size` of `spec` a torch.Size again: torch's pytree gives a returned `x.shape` back
    as a plain tuple, which has no `numel()`."""
    if spec.type is torch.Size:
        return torch.Size(value)
    children = spec.children()
    if not children or not any(_has_sizes(c) for c in children):
        return value
    if isinstance(value, dict):  # a copy keeps the dict's class (OrderedDict, defaultdict's factory)
        out = copy.copy(value)
        for k, c in zip(value, children):
            out[k] = _sizes_back(value[k], c)
        return out
    rebuilt = [_sizes_back(v, c) for v, c in zip(value, children)]
    return rebuilt if type(value) is list else value._make(rebuilt) if hasattr(value, "_make") else type(value)(rebuilt)


def _holds_traced_values(value: Any, depth: int = 3) -> bool:
    """Whether a return value's leaf that is no pytree (a dataclass, an object of the user's class) holds, within a
    few attribute levels or closure cells, a value of the trace (a fake tensor, a symbolic size). Kept as a
    constant, the caller would get the trace's fake tensor back instead of numbers (a dataclass of results did);
    modules and classes are the user's own objects, returned as they are."""
    if isinstance(value, _TRACED):
        return True
    if depth == 0 or isinstance(value, (torch.nn.Module, type, types.ModuleType, torch.Tensor)):
        return False
    if isinstance(value, types.FunctionType):  # a closure made in the function may hold its values
        return any(_holds_traced_values(_contents(cell), depth - 1) for cell in value.__closure__ or ())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_traced_values(v, depth - 1) for v in value)
    if isinstance(value, dict):
        return any(_holds_traced_values(v, depth - 1) for v in value.values())
    if dataclasses.is_dataclass(value):
        return any(_holds_traced_values(getattr(value, f.name, None), depth - 1) for f in dataclasses.fields(value))
    attributes = getattr(value, "__dict__", None)
    return isinstance(attributes, dict) and any(_holds_traced_values(v, depth - 1) for v in attributes.values())


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None
