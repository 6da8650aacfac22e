"""Which writes a functional graph cannot repeat as eager runs them, judged from the tensors' layouts
(`write_overlap`, asked by capture's `_Uncapturable` mode for every op that reaches dispatch).

A functional graph reads every operand of an op before it writes, and writes each element of the result once.
Eager writes in place: where the written tensor holds an element twice, or shares memory with an operand the op
reads, eager either raises (ATen's memory-overlap checks) or computes in its own order, and in both cases the graph
would return other numbers without a word. Capture refuses such a write; the function runs eagerly.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import _disable_current_modes


def write_overlap(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """Why a functional graph cannot give eager's outcome of this call, or None. The op writes a tensor (`self` of
    an in-place op, `out=`) that

    - holds an element twice (a zero stride: `x[:2].expand(3, 2).add_(1)`), or shares part, not all, of its memory
      with another operand where both are non-overlapping and dense (`x[1:].add_(x[:-1])`, `x.add_(x[0])`): eager
      raises (ATen's memory-overlap checks, `MemoryOverlap.cpp`, on the layouts alone), but for `fill_` and
      `zero_`, whose write into an expanded view functionalization turns into a sum over its copies;
    - shares elements with another operand, or with itself, in layouts ATen's check calls too hard to judge
      (`x[:, 1:].add_(x[:, :-1])`, `x.add_(x[:1].expand_as(x))`): eager computes element by element, each write
      seen by the reads after it, so its numbers depend on the order it writes in; the functional graph reads
      everything first;
    - shares any element with an operand of an op that is not elementwise (index, scatter, matmul, scan, `out=`),
      the same view included: eager raises for most and reads while it writes for the rest. An `out=` op whose
      `self` is the out tensor and that has an in-place form is that in-place op, which starts from `self`.

    Strided views of one storage whose elements interleave without meeting (`x[::2]` and `x[1::2]`, the halves of
    a last dimension) pass: their elements are compared, in contiguous runs. Symbolic sizes are judged by their
    hints, without guards."""
    schema, tags = getattr(func, "_schema", None), getattr(func, "tags", ())
    if schema is None or not schema.is_mutable or torch.Tag.inplace_view in tags:  # t_(), detach_(): no values
        return None
    written, operands, start = [], [], None
    for i, argument in enumerate(schema.arguments):
        value = args[i] if i < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
        if argument.alias_info is not None and argument.alias_info.is_write:
            if isinstance(value, torch.Tensor):  # a list written (foreach ops) is not judged
                written.append(value)
        else:
            operands += [t for t in (value if isinstance(value, (list, tuple)) else [value])
                         if isinstance(t, torch.Tensor)]
            start = value if argument.name == "self" and _has_in_place_form(func) else start
    if start is not None and len(written) == 1 and _same_view(start, written[0]):
        operands = [t for t in operands if t is not start]  # `addmm(g, a, b, out=g)` is `g.addmm_(a, b)`
    for target in written:
        layout = _layout(target)
        if layout is None or func is torch.ops.aten.copy_.default and _same_view(target, operands[0]):
            continue  # copy_ of a view onto the same view returns before ATen checks anything
        if not _dense(*layout[:2]):
            if any(st == 0 and sz > 1 for sz, st in zip(*layout[:2])):
                return (f"writes in place into a tensor that holds an element more than once (shape {layout[0]}, "
                        f"strides {layout[1]})")
            if not _apart(layout):
                return (f"writes in place into a tensor whose elements share memory (shape {layout[0]}, strides "
                        f"{layout[1]}): eager's result depends on the order it writes in")
        elementwise = torch.Tag.pointwise in tags or func is torch.ops.aten.copy_.default
        for other in operands:
            if storage_of(other) != storage_of(target) or elementwise and _same_view(target, other):
                continue
            problem = _pair_overlap(layout, _layout(other), elementwise)
            if problem:
                return f"writes in place into a tensor that {problem} (shapes {layout[0]} and {tuple(other.shape)})"
    return None


# Above this many contiguous runs in a layout, its elements are not compared and memory they might share counts as
# shared: a refusal, never a wrong number.
_MAX_RUNS = 1 << 22


def _pair_overlap(a: tuple, b: tuple | None, elementwise: bool) -> str | None:
    """What eager does with a write into layout `a` that another operand, layout `b` of the same storage, reads.

    An elementwise op (ATen's TensorIterator) reads each element before writing it: the same elements in the same
    order are fine, and two non-overlapping and dense layouts overlapping otherwise raise. Any other op (an index
    or scatter op, a matmul, a scan, `out=`) reads operands while it writes: any element shared, even the whole
    tensor, is refused (eager raises for most; the others compute in their own order)."""
    if b is None or 0 in a[0] or 0 in b[0]:
        return None
    (a_begin, a_end), (b_begin, b_end) = _extent(a), _extent(b)
    if a_end <= b_begin or b_end <= a_begin:
        return None
    if elementwise and _dense(*a[:2]) and _dense(*b[:2]):
        same = (a_begin, a_end) == (b_begin, b_end) and a[1] == b[1]
        return None if same else "overlaps another operand in part, which eager refuses"
    with _plain_torch():
        meet = _runs_meet(_runs(a), _runs(b))
    if meet:
        return ("shares elements with another operand it reads: eager raises, or gives numbers that depend on the "
                "order it writes in")
    return None


def _has_in_place_form(func: Any) -> bool:
    return _aten_has(f"{getattr(getattr(func, 'overloadpacket', None), '__name__', '_')}_")


@functools.cache
def _aten_has(name: str) -> bool:
    return not name.endswith("__") and hasattr(torch.ops.aten, name)


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return storage_of(a) == storage_of(b) and a.dtype == b.dtype and _layout(a) == _layout(b)


def _layout(t: torch.Tensor) -> tuple | None:
    """(sizes, strides, offset, itemsize) as ints (symbolic ones by their hints), or None: not judged."""
    try:
        ints = [_hint(v) for v in (*t.shape, *t.stride(), t.storage_offset())]
    except (RuntimeError, NotImplementedError):
        return None
    if None in ints:
        return None
    rank = t.dim()
    return tuple(ints[:rank]), tuple(ints[rank:2 * rank]), ints[-1], t.element_size()


def _hint(v: Any) -> int | None:
    if isinstance(v, int):
        return v
    node = getattr(v, "node", None)
    hint = getattr(node, "hint", None)
    return hint if isinstance(hint, int) else None


def _dims(layout: tuple) -> list[tuple[int, int]]:
    """(size, stride) of the dimensions that step (size above 1), by stride."""
    return sorted(((n, st) for n, st in zip(*layout[:2]) if n > 1), key=lambda d: d[1])


def _dense(sizes: tuple, strides: tuple) -> bool:
    """Non-overlapping and dense: some order of the dimensions is contiguous (dimensions of size 0 or 1 are free)."""
    expected = 1
    for size, stride in _dims((sizes, strides)):
        if stride != expected:
            return False
        expected *= size
    return True


def _extent(layout: tuple) -> tuple[int, int]:
    """The bytes a non-empty layout's elements lie in: [begin, end)."""
    sizes, strides, offset, itemsize = layout
    last = offset + sum((n - 1) * st for n, st in zip(sizes, strides))
    return offset * itemsize, (last + 1) * itemsize


def _apart(layout: tuple) -> bool:
    """No two elements of the layout share memory: by strides where each steps past everything the smaller ones
    reach (any slice, transpose or permutation of a tensor), else by its elements."""
    reach = 0
    for size, stride in _dims(layout):
        if stride <= reach:
            with _plain_torch():
                runs = _runs(layout)
                return runs is not None and not bool((runs[0][1:] < torch.cummax(runs[1], 0).values[:-1]).any())
        reach += (size - 1) * stride
    return True


@contextlib.contextmanager
def _plain_torch() -> Iterator[None]:
    """Real tensors from inside a dispatch handler: the capture's modes (fake, functional, tracing) set aside."""
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        yield


def _runs(layout: tuple) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The layout's memory as byte ranges [start, end), sorted by start: one per contiguous run of elements (a
    dimension of stride 1), or per element. None: more runs than `_MAX_RUNS`."""
    if _dense(*layout[:2]):
        begin, end = _extent(layout)
        return torch.tensor([begin]), torch.tensor([end])
    dims = _dims(layout)
    length = 1
    if dims and dims[0][1] == 1:
        length = dims.pop(0)[0]
    if math.prod(n for n, _ in dims) > _MAX_RUNS:
        return None
    itemsize = layout[3]
    starts = torch.tensor([layout[2]], dtype=torch.int64)
    for size, stride in dims:
        starts = (starts[:, None] + torch.arange(size, dtype=torch.int64) * stride).flatten()
    starts = starts.sort().values * itemsize
    return starts, starts + length * itemsize


def _runs_meet(a: tuple | None, b: tuple | None) -> bool:
    """Whether a byte of one set of runs lies in the other (so, unknown: True)."""
    if a is None or b is None:
        return True
    (a_starts, a_ends), (b_starts, b_ends) = a, b
    before = torch.searchsorted(b_starts, a_ends) - 1  # per run of a: the last run of b that starts before its end
    reach = torch.cummax(b_ends, 0).values  # the furthest any of b's runs up to there ends
    return bool(((before >= 0) & (reach[before.clamp(min=0)] > a_starts)).any())


def storage_of(t: torch.Tensor) -> StorageWeakRef | None:
    """The storage t shares with its views; None for a tensor without one (sparse, nested): not tracked."""
    try:
        return StorageWeakRef(t.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None
