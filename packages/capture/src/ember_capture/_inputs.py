"""The graph inputs of a traced function: where each comes from on a call, and arguments that share memory.

A traced graph reads three sorts of tensors, in this order of inputs: the parameters and buffers of the modules it
reaches (`ModuleState`, fixed objects), the tensors it reads from globals and closures (`Reads`, fetched again on
every call), and its tensor arguments. One tensor object is one input however many times it is met: `f(x, x)`, or a
global that is also an argument, traces both places on the same input, and the guard checks they are still one.

Different tensors over one storage (`f(x, x.view(2, 3))`, overlapping slices) are separate inputs first, which is
right as long as the graph writes none of them. When it writes one, the frontend traces again with `bases=True`:
arguments over one storage become views of one input, their *base*, a flat tensor over the storage from offset 0
to the end of the last argument, from which each argument is rebuilt with `as_strided` inside the graph.
Functionalization then sees a write through one argument in every read of the other, as eager does, and the write
reaches the caller through the base. Such arguments are traced with static sizes; the guard checks that they still
share a storage (their places are checked with their strides and offsets). Where no base can be built (an argument
that requires grad, a global or a parameter in the group) and the graph writes the group, the function cannot be
one graph (`CaptureError`).

The other way round, a graph that writes an input and was traced with no sharing is wrong if that input shares
memory with another on a later call: its guard checks each written input against the others (not against
parameters and buffers, which ModuleState holds fixed).

A float argument made dynamic (`float_leaves`: one that changed between calls, under automatic dynamic), and a float
global or attribute made dynamic (`reads.floats`), is an input of its own after all the others: a 0-d float64
tensor made from the float on each call, read back with `.item()` while tracing, as Dynamo passes a float it does
not specialize. Kernels read it from that tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ember_core import unsupported_tensor
from torch._subclasses.fake_tensor import FakeTensorMode

from ._errors import CaptureError
from ._guards import GuardBuilder, storage_of
from ._reads import Read, Reads
from ._state import ModuleState


def check_inputs(layout: InputLayout, flat: list) -> None:
    """`CaptureError` naming the first input (argument, parameter, buffer or read global) ember cannot take. A
    `torch.Generator` argument draws at run time from state a graph cannot hold (and torch 2.11's make_fx raised
    NotImplementedError on it, out of the compile): the function runs eagerly, drawing eager's numbers."""
    for i, x in enumerate(flat):
        if isinstance(x, torch.Generator):
            raise CaptureError(f"argument {layout.labels[i]!r} is a torch.Generator: its draws cannot be traced "
                               "into a graph")
    for name, t in zip(layout.names, layout.tensors):
        kind = unsupported_tensor(t)
        if kind is not None:
            raise CaptureError(f"input {name!r} is {kind}: ember traces dense, strided tensors only")


@dataclass
class Base:
    """Arguments over one storage, traced as views of one flat input of `size` elements."""

    members: list[int]  # argument leaves, the first is the one the base is taken from on a call
    size: int
    views: list[tuple[tuple[int, ...], tuple[int, ...], int]]  # per member: sizes, strides, storage offset


@dataclass
class _Unit:
    """One graph input that a call can change: a read tensor, an argument, or a base (by its first member)."""

    input: int  # graph input index
    var: str  # guard code for the tensor (a read's or argument's local)
    label: str


class InputLayout:
    """Plans the graph inputs of one trace. `names`, `kinds` and `tensors` (one example per input) are in input
    order; `leaf_input[i]` says where argument leaf `i` comes from while tracing."""

    def __init__(self, state: ModuleState, reads: Reads, flat: list, leaves: list[int], labels: list[str],
                 bases: bool = False, float_leaves: Sequence[int] = ()):
        self.state, self.reads, self.leaves, self.labels = state, reads, leaves, labels
        self.names: list[str] = list(state.names)
        self.kinds: list[str] = list(state.kinds)
        self.tensors: list[torch.Tensor] = list(state.tensors)
        first: dict[int, int] = {id(t): k for k, t in enumerate(state.tensors)}  # tensor → its input
        self.read_inputs: list[int] = []  # per `reads.tensors`: its input
        self.own_reads: list[Read] = []  # the reads that are inputs of their own, in input order
        for r in reads.tensors:
            if id(r.value) not in first:
                first[id(r.value)] = len(self.tensors)
                self._add(r.label, "param" if isinstance(r.value, torch.nn.Parameter) else "buffer", r.value)
                self.own_reads.append(r)
            self.read_inputs.append(first[id(r.value)])
        self.duplicates: list[tuple[int, int]] = []  # (leaf, parameter or read input it is the same tensor as)
        self.same_leaf: list[tuple[int, int]] = []  # (leaf, earlier leaf it is the same tensor as)
        self.user: list[int] = []  # leaves that are inputs of their own
        self.leaf_input: dict[int, int] = {}
        leaf_of: dict[int, int] = {}  # tensor → the first leaf holding it
        for i in leaves:
            t = flat[i]
            if id(t) in leaf_of:
                self.same_leaf.append((i, leaf_of[id(t)]))
            elif id(t) in first:
                self.duplicates.append((i, first[id(t)]))
                self.leaf_input[i] = first[id(t)]
            else:
                leaf_of[id(t)] = i
                first[id(t)] = len(self.tensors)
                self._add(labels[i], "user", t)
                self.user.append(i)
                self.leaf_input[i] = first[id(t)]
        self.bases: list[Base] = []
        self.loose: list[tuple[list[int], bool]] = []  # inputs over one storage kept separate; could be a base?
        self._group(flat, bases)
        self.float_leaves = list(float_leaves)  # each an input of its own, the last ones
        for i in self.float_leaves:
            self._add(labels[i], "user", torch.tensor(flat[i], dtype=torch.float64))
        for r in reads.floats:
            self._add(r.label, "user", torch.tensor(r.value, dtype=torch.float64))

    def _add(self, label: str, kind: str, t: torch.Tensor) -> None:
        self.names.append(label)
        self.kinds.append(kind)
        self.tensors.append(t)

    def _group(self, flat: list, bases: bool) -> None:
        """Inputs over one storage: with `bases`, arguments alone and without grad get a base; the rest are loose."""
        groups: dict[int, list[int]] = {}
        for k, t in enumerate(self.tensors):
            groups.setdefault(storage_of(t), []).append(k)
        user_input = {self.leaf_input[i]: i for i in self.user}
        n_args = len(self.tensors)
        for members in groups.values():
            if len(members) < 2:
                continue
            tensors = [self.tensors[k] for k in members]
            eligible = all(k in user_input for k in members) and not any(t.requires_grad for t in tensors) and \
                len({(t.dtype, t.device) for t in tensors}) == 1
            if eligible and bases:
                leaves = [user_input[k] for k in members]
                views = [(tuple(t.shape), tuple(t.stride()), t.storage_offset()) for t in tensors]
                size = max(_end(*v) for v in views)
                self.bases.append(Base(leaves, size, views))
            else:
                self.loose.append((members, eligible))
        in_base = {i for b in self.bases for i in b.members}
        if not in_base:
            return
        # the base's members leave the argument inputs; each base is an input after them
        kept = [k for k in range(n_args) if not (k in user_input and user_input[k] in in_base)]
        renumber = {k: n for n, k in enumerate(kept)}
        self.names = [self.names[k] for k in kept]
        self.kinds = [self.kinds[k] for k in kept]
        self.tensors = [self.tensors[k] for k in kept]
        self.read_inputs = [renumber[k] for k in self.read_inputs]
        self.user = [i for i in self.user if i not in in_base]
        self.leaf_input = {i: renumber[k] for i, k in self.leaf_input.items() if i not in in_base}
        self.duplicates = [(i, renumber[k]) for i, k in self.duplicates]
        self.loose = [([renumber[k] for k in g], e) for g, e in self.loose]
        for b in self.bases:
            first = flat[b.members[0]]
            self._add(f"{self.labels[b.members[0]]}_base", "user",
                      first.as_strided((b.size,), (1,), 0))

    # ------------------------------------------------------------------------------------------ tracing

    def fakes(self, fake_mode: FakeTensorMode, user_fake: Callable[[int, int], torch.Tensor]) -> list[torch.Tensor]:
        """A fake per input: static for parameters, reads and bases; `user_fake(leaf, k)` for the k-th argument."""
        n_fixed = len(self.state.tensors) + len(self.own_reads)
        fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in self.tensors[:n_fixed]]
        fakes += [user_fake(i, k) for k, i in enumerate(self.user)]
        with fake_mode:
            for b in self.bases:
                t = self.tensors[len(fakes)]
                fakes.append(torch.empty_strided((b.size,), (1,), dtype=t.dtype, device=t.device))
        fakes += [fake_mode.from_tensor(t, static_shapes=True) for t in self.tensors[len(fakes):]]
        return fakes

    def leaf_values(self, inputs: Sequence[Any]) -> dict[int, Any]:
        """Each argument leaf's value while tracing, from the graph's (fake) inputs: bases rebuilt as views."""
        values = {i: inputs[k] for i, k in self.leaf_input.items()}
        first_float = len(inputs) - len(self.float_leaves) - len(self.reads.floats)
        first_base = first_float - len(self.bases)
        for j, i in enumerate(self.float_leaves):
            values[i] = inputs[first_float + j].item()
        for j, b in enumerate(self.bases):
            for i, (size, stride, offset) in zip(b.members, b.views):
                values[i] = torch.as_strided(inputs[first_base + j], size, stride, offset)
        for i, j in self.same_leaf:
            values[i] = values[j]
        return values

    def read_values(self, inputs: Sequence[Any]) -> list[Any]:
        return [inputs[k] for k in self.read_inputs]

    def read_floats(self, inputs: Sequence[Any]) -> list[Any]:
        """The symbolic value of each float of `reads.floats` while tracing."""
        n = len(self.reads.floats)
        return [t.item() for t in inputs[len(inputs) - n:]] if n else []

    def needs_bases(self, mutated: set[int]) -> bool:
        """Whether the graph writes an input that shares its storage with another, separate input: True when a
        trace with `bases=True` would take it; `CaptureError` when nothing would."""
        written = [(members, eligible) for members, eligible in self.loose if any(k in mutated for k in members)]
        for members, eligible in written:
            if not eligible or self.bases:
                names = ", ".join(self.names[k] for k in members)
                raise CaptureError(f"the function writes one of the inputs {names}, which share memory, and they are "
                                   "not all arguments without grad: the trace frontend cannot make them one graph")
        return bool(written)

    # ------------------------------------------------------------------------------------------ calls

    def gather(self) -> Callable[[list], list]:
        """`inputs(flat)`: the graph inputs of a call, from its argument leaves."""
        fixed = list(self.state.tensors)
        fetch = [r.fetch for r in self.own_reads]
        user = list(self.user)
        bases = [(b.members[0], (b.size,)) for b in self.bases]
        floats, f64 = list(self.float_leaves), torch.float64
        read_floats = [r.fetch for r in self.reads.floats]
        if not fetch and not bases and not floats and not read_floats:
            return lambda flat: fixed + [flat[i] for i in user]

        def inputs(flat: list) -> list:
            out = fixed + [f() for f in fetch] + [flat[i] for i in user]
            for i, size in bases:
                out.append(flat[i].as_strided(size, (1,), 0))
            out += [torch.tensor(flat[i], dtype=f64) for i in floats]
            out += [torch.tensor(f(), dtype=f64) for f in read_floats]
            return out

        return inputs

    def add_checks(self, g: GuardBuilder, mutated: set[int]) -> None:
        """The sharing the graph was traced with, still there; and none new where the graph writes an input."""
        var = self._vars(g)
        for i, k in self.duplicates:
            g.check(f"a{i} is not {var[k]}", "{label} is no longer the same tensor as {other}", label=self.labels[i],
                    other=self.names[k])
        for i, j in self.same_leaf:
            g.check(f"a{i} is not a{j}", "{label} is no longer the same tensor as {other}", label=self.labels[i],
                    other=self.labels[j])
        for b in self.bases:
            first = b.members[0]
            g.let(f"s{first}", f"_storage_of(a{first})")
            for i in b.members[1:]:
                g.check(f"_storage_of(a{i}) != s{first}", "{label} no longer shares memory with {other}",
                        label=self.labels[i], other=self.labels[first])
        units = self._units(var)
        written = [u for u in units if u.input in mutated]
        if not written:
            return
        for u in units:
            g.let(f"s_{u.input}", f"_storage_of({u.var})")
        for w in written:
            for u in units:
                if u is not w:
                    g.check(f"s_{w.input} == s_{u.input}", "{label} now shares memory with {other}, and the graph "
                            "writes {label}", label=w.label, other=u.label)

    def _vars(self, g: GuardBuilder) -> dict[int, str]:
        """Guard code for each input that is not a base: a constant for parameters, a local for the rest."""
        var = {k: g.const("P", t) for k, t in enumerate(self.state.tensors) if any(k == d for _, d in self.duplicates)}
        for r, k in zip(self.reads.tensors, self.read_inputs):
            var.setdefault(k, r.var)
        for i in self.user:
            var[self.leaf_input[i]] = f"a{i}"
        return var

    def _units(self, var: dict[int, str]) -> list[_Unit]:
        n_state = len(self.state.tensors)
        units = [_Unit(k, var[k], self.names[k]) for k in range(n_state, n_state + len(self.own_reads))]
        units += [_Unit(self.leaf_input[i], f"a{i}", self.labels[i]) for i in self.user]
        first_base = len(self.tensors) - len(self.bases)
        units += [_Unit(first_base + j, f"a{b.members[0]}", self.labels[b.members[0]])
                  for j, b in enumerate(self.bases)]
        return units


def _end(size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> int:
    """One past the last storage element a view reaches."""
    if any(n == 0 for n in size):
        return offset
    return offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
