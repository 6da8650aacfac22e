"""The graph-interchange schema, in memory: frozen, slotted dataclasses.

A `Graph` is a functional ATen program in topological order. Values are named strings; every value has a
`Value` record with its metadata. Arguments are plain Python data plus two tags: `Ref` (a value of the graph)
and `Sym` (a symbolic size expression over the graph's symbols). JSON I/O lives in `_json.py`, printing in
`_printer.py`, checks in `_verify.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._ops import is_view_op

# (major, minor). Rules: a field added with a default, or text a field may newly hold (1.2: a float in a size
# expression), is a minor bump; a field removed or changed is a major bump.
# tests/test_schema_lock.py fails when the schema's shape changes without a bump.
SCHEMA_VERSION: tuple[int, int] = (1, 2)

INPUT_KINDS = ("user", "param", "buffer", "tangent", "saved", "rng")
OUTPUT_KINDS = ("user", "grad", "saved", "mutation", "alias")
VALUE_TYPES = ("tensor", "sym", "scalar", "none")
REGIONS = ("forward", "backward")

# A dimension, stride or offset: a concrete int or a sympy expression over the graph's symbols, as text.
Dim = int | str


@dataclass(frozen=True, slots=True)
class Ref:
    """An argument that refers to a value of the graph by name."""

    name: str


@dataclass(frozen=True, slots=True)
class Sym:
    """An argument that is a symbolic integer, written as a sympy expression over the graph's symbols."""

    expr: str


# a symbol's lower bound when its range has none: an int the program passed may be any int64
INT64_MIN = -(1 << 63)


@dataclass(frozen=True, slots=True)
class Symbol:
    """A symbolic size or int: its name (`s0`), the value it had when traced, and its known range (upper None =
    inf). A size is never negative; an int the program passed (Dynamo makes one that changes a symbol: an index,
    a start) may be, down to `INT64_MIN` when nothing bounds it below, so only a lower bound of 0 or more says
    it is not negative."""

    name: str
    hint: int
    lower: int = 0
    upper: int | None = None


@dataclass(frozen=True, slots=True)
class Value:
    """Metadata of one value. Tensors fill every field; `sym` and `scalar` values only `type` and `dtype`."""

    type: str = "tensor"
    dtype: str = "float32"
    shape: tuple[Dim, ...] = ()
    stride: tuple[Dim, ...] = ()
    device: str = "cpu"
    requires_grad: bool = False
    base: str | None = None  # the value whose storage this one views, if known
    storage_offset: Dim = 0

    def replace(self, **changes: Any) -> Value:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Input:
    """A graph input. `mutated` says the graph writes it (the new content is a `mutation` output)."""

    name: str
    kind: str = "user"
    mutated: bool = False


@dataclass(frozen=True, slots=True)
class Output:
    """A graph output. For kinds `mutation` and `alias`, `input` is the index of the input concerned."""

    name: str
    kind: str = "user"
    input: int | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """One op application. `outputs` names its results (ops that return tuples have several)."""

    outputs: tuple[str, ...]
    op: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)  # source, module, region

    def replace(self, **changes: Any) -> Node:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Constant:
    """A tensor the graph closes over. Small ones travel inline in JSON, large ones in a side file."""

    name: str
    tensor: torch.Tensor

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Constant):
            return NotImplemented
        a, b = (t.to_dense() if t.is_mkldnn else t for t in (self.tensor, other.tensor))  # a pre-packed weight
        return (
            self.name == other.name
            and a.dtype == b.dtype
            and a.shape == b.shape
            and (not a.numel() or _same_values(a.cpu(), b.cpu()))
        )

    __hash__ = None  # type: ignore[assignment]


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal elementwise, a NaN equal to a NaN (a constant holding one equals itself, and its JSON and text).
    Floats are compared in 64 bits, which hold every value of the narrower ones (torch compares no float8)."""
    if a.is_floating_point() or a.is_complex():
        wide = torch.complex128 if a.is_complex() else torch.float64
        a, b = a.to(wide), b.to(wide)
        nan = a.isnan()
        return bool(torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0)))
    return bool(torch.equal(a, b))


@dataclass(frozen=True, slots=True)
class Graph:
    """A functional ATen program: the unit every stage takes and gives."""

    name: str = "graph"
    inputs: tuple[Input, ...] = ()
    nodes: tuple[Node, ...] = ()
    outputs: tuple[Output, ...] = ()
    values: dict[str, Value] = field(default_factory=dict)
    symbols: tuple[Symbol, ...] = ()
    constants: dict[str, Constant] = field(default_factory=dict)
    producer: str = ""
    version: tuple[int, int] = SCHEMA_VERSION
    # Graphs that nodes of this one name (schema 1.1): the forward and backward of each custom autograd function
    # call, `ember.custom_function` (see `_custom_function.py`). Each is a whole graph with its own values.
    subgraphs: dict[str, Graph] = field(default_factory=dict)

    def replace(self, **changes: Any) -> Graph:
        return dataclasses.replace(self, **changes)

    # __str__ is the graph's text form, `format_graph`: `_printer.py` sets it (it imports this module, not the other
    # way round)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    @property
    def user_outputs(self) -> tuple[Output, ...]:
        return tuple(o for o in self.outputs if o.kind in ("user", "alias"))


def iter_refs(arg: Any):
    """Yield every value name an argument refers to, looking inside lists and kwargs."""
    if isinstance(arg, Ref):
        yield arg.name
    elif isinstance(arg, (list, tuple)):
        for a in arg:
            yield from iter_refs(a)
    elif isinstance(arg, dict):
        for a in arg.values():
            yield from iter_refs(a)


def graph_device(graph: Graph) -> str:
    """The device a graph computes on, as torch names it (`cpu`, `cuda:0`): that of its first tensor input, else of
    its first constant, else of its first tensor value, else `cpu`. A 0-d CPU tensor input counts only when no
    other tensor input does: ATen takes one beside tensors of any device, as a number (Dynamo passes a Python
    float that changes as one, and it may come first: a CUDA optimizer step's learning rate)."""
    tensors = [v for v in (graph.values.get(inp.name) for inp in graph.inputs) if v is not None and v.type == "tensor"]
    for v in tensors:
        if v.shape != () or v.device != "cpu":
            return v.device
    if tensors:
        return tensors[0].device
    for c in graph.constants.values():
        return str(c.tensor.device)
    return next((v.device for v in graph.values.values() if v.type == "tensor"), "cpu")


def has_sym(arg: Any) -> bool:
    """Whether an argument is, or holds in its lists, a symbolic size."""
    if isinstance(arg, Sym):
        return True
    if isinstance(arg, (list, tuple)):
        return any(has_sym(a) for a in arg)
    return False


def node_refs(node: Node):
    """Yield the names of the values a node reads, in argument order."""
    yield from iter_refs(node.args)
    yield from iter_refs(node.kwargs)


def map_args(arg: Any, leaf: Callable[[Any], Any]) -> Any:
    """`arg` (an argument, or a tuple or list of them, nested) with `leaf` applied to each argument that is not a
    tuple or list; the nesting and its types are kept."""
    if isinstance(arg, (list, tuple)):
        return type(arg)(map_args(a, leaf) for a in arg)
    return leaf(arg)


def _map_refs(arg: Any, names: Mapping[str, str]) -> Any:
    return map_args(arg, lambda a: Ref(names.get(a.name, a.name)) if isinstance(a, Ref) else a)


def rename_reads(node: Node, names: Mapping[str, str]) -> Node:
    """`node` reading `names[v]` wherever it read a value `v` named in `names` (its outputs unchanged)."""
    if not names:
        return node
    kwargs = {k: _map_refs(v, names) for k, v in node.kwargs.items()}
    return node.replace(args=_map_refs(node.args, names), kwargs=kwargs)


def prune_values(graph: Graph) -> Graph:
    """`graph` without the values no input or node defines any more (a pass removed or absorbed their nodes); the
    graph itself when there are none."""
    defined = set(graph.input_names) | {o for n in graph.nodes for o in n.outputs}
    if all(k in defined for k in graph.values):
        return graph
    return graph.replace(values={k: v for k, v in graph.values.items() if k in defined})


def memory_format_of(value: Value) -> torch.memory_format | None:
    """The memory format a new tensor of `value`'s shape takes `value`'s strides from: contiguous, channels-last
    (4-d) or channels-last-3d (5-d); None for another layout or a symbolic one."""
    if not all(type(d) is int for d in (*value.shape, *value.stride)):
        return None
    forms = {4: (torch.contiguous_format, torch.channels_last), 5: (torch.contiguous_format, torch.channels_last_3d)}
    for form in forms.get(len(value.shape), (torch.contiguous_format,)):
        if torch.empty(value.shape, device="meta", memory_format=form).stride() == tuple(value.stride):
            return form
    return None


def copy_to_layout(source: str, target: str, declared: Value, meta: Mapping[str, Any] | None = None) -> Node | None:
    """A node defining `target` as a copy of `source` in `declared`'s layout (`aten.clone` with its memory format):
    how a pass that changes a result's layout gives the graph's caller the one it declared. None when no memory
    format gives that layout."""
    form = memory_format_of(declared)
    if form is None:
        return None
    return Node((target,), "aten.clone.default", (Ref(source),), {"memory_format": form}, dict(meta or {}))


def returned_views(graph: Graph, outputs: Iterable[str] | None = None) -> set[str]:
    """The values made by views, and views of views, of a value on the way to a returned one (of `outputs`, by
    default every output): a pass that changes a value's layout lets such views read it in its declared layout, so
    that what the graph returns keeps eager's strides and shares storage as eager's views do."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    found: set[str] = set()
    for name in (o.name for o in graph.outputs) if outputs is None else outputs:
        while name in producer and name not in found and is_view_op(producer[name].op):
            found.add(name)
            source = producer[name].args[0] if producer[name].args else None
            if not isinstance(source, Ref):
                break
            name = source.name
    return found


def fresh_name(graph: Graph, base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2` ..., unused by the graph's inputs, values, constants and `taken` (updated): a
    name for a value a pass adds."""
    used = set(graph.values) | set(graph.constants) | set(graph.input_names) | taken
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
