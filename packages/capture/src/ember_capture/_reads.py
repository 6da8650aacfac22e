"""What a traced function reads besides its arguments: globals, closure cells and what hangs off them.

make_fx runs the function once and keeps what it read as constants: a global float becomes a literal in the graph,
a global tensor a constant. `find_reads(fn)` finds those values before the trace by walking code objects: the names
a code object loads as globals (`LOAD_GLOBAL`), its closure cells (`co_freevars`) and the attribute names it loads
(`LOAD_ATTR`, `LOAD_METHOD`), in the function itself, in its nested code (lambdas, comprehensions) and in the code it
names (helpers, methods, the `forward` of every module it reaches). Each value found is a `Read`, kept by kind:
- `value`: a Python scalar (None, bool, int, float, str, dtype, ...), guarded by type and value; a float the
  frontend made dynamic (`Reads.dynamic`, by label: it changed between calls) is guarded by type only, and is a
  graph input instead, fetched on every call like a tensor. Only a float the function reads from its own globals or
  closure cells, and no other code reads, can be made dynamic (`dynamic_floats`): the trace reads it through a copy
  of the function (`with_floats`), since a float cannot be swapped where other threads see it;
- `tensor`: a graph input like a parameter, fetched again from where it was found on every call (new values and new
  tensors of the same metadata reuse the graph), guarded by its metadata;
- `module`: an `nn.Module`, guarded by identity; its parameters and buffers are lifted by `_state.py`;
- `container`: a list, tuple or dict, guarded by type and length (a dict by its keys), each item read in turn;
- `object`: anything else (a function, a class, a namespace), guarded by identity. The attributes the walked code
  loads that such an object holds in its own `__dict__` are read in turn, and its user-code methods walked.

The walk over-approximates: a name loaded on a branch not taken is guarded too. It does not enter code outside the
user's files (torch, ember, the standard library, installed packages), and it cannot see names made at run time
(`globals()[name]`, `getattr(obj, name)`).

Guards reach every value through constants (the globals dict, the cell, the key): no name, key or value becomes code.
While the function is traced, it reads the trace's stand-ins in place of the tensors found through `StandIns`
(`pairs`), a per-thread torch function mode: nothing is written where the tensors were found, so other threads see
the user's objects. A function that puts another tensor where one was found (`CACHE[0] = CACHE[0] * 2`) cannot be
a graph: `kept` puts the found one back and refuses the trace.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ._errors import CaptureError
from ._guards import GuardBuilder, Live, shown, tensor_checks, value_check
from ._stand_ins import function_of, with_values
from ._user_code import code_names, is_user_code, user_module

MAX_READS = 10_000  # more than this and the function falls back to eager: pass such state as arguments
_SCALARS = (type(None), bool, int, float, str, bytes, torch.dtype, torch.device, torch.memory_format, torch.layout)


@dataclass(eq=False)
class Read:
    """One value found: `step` says how to reach it from `parent` (or from nothing, for a root)."""

    parent: Read | None
    step: tuple  # ("global", globals, name) | ("cell", cell, name) | ("const", obj, label) | ("item", key)
    #              | ("attr", name) | ("module", name)
    value: Any
    kind: str  # value | tensor | module | container | object | path
    label: str
    var: str = ""  # its local in the guard being built

    @functools.cached_property
    def fetch(self) -> Callable[[], Any]:
        """Reads the value again, as it is now."""
        parent = self.parent.fetch if self.parent is not None else None
        how = self.step
        if how[0] == "global":
            return functools.partial(how[1].get, how[2])
        if how[0] == "cell":
            cell = how[1]
            return lambda: cell.cell_contents
        if how[0] == "const":
            obj = how[1]
            return lambda: obj
        if how[0] == "item":
            key = how[1]
            return lambda: parent()[key]
        name = how[1]
        if how[0] == "attr":
            return lambda: vars(parent()).get(name)
        return lambda: parent()._modules.get(name)

    def assign(self, value: Any) -> None:
        """Puts `value` where this read was found. A tuple on the way is rebuilt and assigned to its own parent."""
        how = self.step
        if how[0] == "global":
            how[1][how[2]] = value
        elif how[0] == "cell":
            how[1].cell_contents = value
        elif how[0] == "item":
            container = self.parent.fetch()
            if isinstance(container, tuple):
                items = list(container)
                items[how[1]] = value
                self.parent.assign(container._make(items) if hasattr(container, "_make") else type(container)(items))
            else:
                container[how[1]] = value
        elif how[0] == "attr":
            owner = self.parent.fetch()
            if isinstance(owner, type):  # a class's namespace is read-only as a mapping
                setattr(owner, how[1], value)
            else:
                vars(owner)[how[1]] = value
        else:
            raise CaptureError(f"cannot substitute {self.label} while tracing")

    def code(self, g: GuardBuilder) -> str:
        """Guard code that reads the value from its parent's local."""
        how = self.step
        if how[0] == "global":
            return f"{g.const('G', how[1])}.get({g.const('N', how[2])})"
        if how[0] == "cell":
            return f"{g.const('CELL', how[1])}.cell_contents"
        if how[0] == "const":
            return g.const("O", how[1])
        parent = self.parent.var
        if how[0] == "item":
            return f"{parent}[{g.literal('K', how[1])}]"
        if how[0] == "attr":
            return f"{parent}.__dict__.get({g.const('N', how[1])})"
        return f"{parent}._modules.get({g.const('N', how[1])})"


@dataclass
class Owner:
    """A module whose parameters and buffers the function reads, found at `read`; `prefix` names its tensors."""

    module: torch.nn.Module
    prefix: str
    read: Read


@dataclass
class Reads:
    """Everything `find_reads` found, in walk order."""

    found: list[Read] = field(default_factory=list)
    dynamic: frozenset[str] = frozenset()  # labels of float values made graph inputs
    root: Any = None  # the Python function the walk started from, when a copy of it can stand in for it
    loaders: dict[int, set[int]] = field(default_factory=dict)  # id(root read) → ids of the code objects loading it
    walks: dict[int, int] = field(default_factory=dict)  # id(code) → how many times the walk reached it

    @property
    def floats(self) -> list[Read]:
        """The float values made graph inputs, one per label (the first place it was found)."""
        seen: set[str] = set()
        return [r for r in self.found if self._is_dynamic(r) and not (r.label in seen or seen.add(r.label))]

    def _is_dynamic(self, r: Read) -> bool:
        return r.kind == "value" and type(r.value) is float and r.label in self.dynamic

    def constant_floats(self) -> list[Read]:
        """The float values traced as constants: any of them that changes is a candidate for `dynamic`."""
        return [r for r in self.found if r.kind == "value" and type(r.value) is float and r.label not in self.dynamic]

    @property
    def tensors(self) -> list[Read]:
        """The tensor reads, one per tensor object (the first place it was found)."""
        seen: set[int] = set()
        return [r for r in self.found if r.kind == "tensor" and not (id(r.value) in seen or seen.add(id(r.value)))]

    @property
    def owners(self) -> list[Owner]:
        """The modules found, one per module object."""
        seen: set[int] = set()
        return [Owner(r.value, r.label if r.parent is not None or r.step[0] != "const" else "", r)
                for r in self.found if r.kind == "module" and not (id(r.value) in seen or seen.add(id(r.value)))]

    def add_checks(self, g: GuardBuilder) -> None:
        """Checks that every value read is still what the trace saw: scalars by value, tensors by metadata (and,
        where one tensor was found in two places, that it still is), containers by shape, the rest by identity."""
        first: dict[int, Read] = {}
        for k, r in enumerate(self.found):
            r.var = f"r{k}"
            g.let(r.var, r.code(g), r.label)
            if self._is_dynamic(r):
                g.check(f"type({r.var}) is not float", "{label}: is no longer a float", label=r.label)
            elif r.kind == "value":
                value_check(g, r.var, r.label, r.value)
            elif r.kind == "tensor":
                tensor_checks(g, r.var, r.label, r.value, type(r.value))
                same = first.setdefault(id(r.value), r)
                if same is not r:
                    g.check(f"{r.var} is not {same.var}", "{label} is no longer the tensor {other}", label=r.label,
                            other=same.label)
            elif r.kind == "container":
                _container_checks(g, r)
            elif r.kind in ("module", "object") and r.step[0] != "const":  # a constant root is itself
                g.check(f"{r.var} is not {g.const('O', r.value)}", "{label}: is a different object", label=r.label)

    def dynamic_floats(self, labels: frozenset[str]) -> frozenset[str]:
        """The labels among `labels` whose every float read `with_floats` can give the trace: a global or closure
        cell of the function itself, read by no other code (a helper, a method) and the function reached once.
        The others stay constants, guarded by value."""
        code = getattr(self.root, "__code__", None)
        if code is None or self.walks.get(id(code)) != 1:
            return frozenset()
        floats = [r for r in self.found if r.kind == "value" and type(r.value) is float and r.label in labels]
        refused = {r.label for r in floats if r.parent is not None or self.loaders.get(id(r)) != {id(code)}}
        return frozenset(r.label for r in floats) - refused

    def with_floats(self, fn: Callable, values: Sequence[Any]) -> Callable:
        """`fn`, reading `values` (in `self.floats` order) for the dynamic floats: a copy of it when there are
        any (see `_stand_ins.with_values`)."""
        value_of = {r.label: v for r, v in zip(self.floats, values)}
        places = [r for r in self.found if r.label in value_of and self._is_dynamic(r)]
        globals_ = {r.step[2]: value_of[r.label] for r in places if r.step[0] == "global"}
        cells = {id(r.step[1]): value_of[r.label] for r in places if r.step[0] == "cell"}
        return with_values(fn, globals_, cells)

    def pairs(self, values: list[Any]) -> list[tuple[torch.Tensor, Any]]:
        """(tensor, its stand-in from `values`, in `self.tensors` order), for `StandIns`."""
        return [(r.value, v) for r, v in zip(self.tensors, values)]

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """While inside, the function may put other tensors where tensors were found; on the way out, the found ones
        are put back, and `CaptureError` says where (after an error inside, they are put back and the error goes on)."""
        places = [r for r in self.found if r.kind == "tensor"]
        try:
            yield
        except BaseException:
            _put_back(places)
            raise
        moved = _put_back(places)
        if moved:
            raise CaptureError(f"the function puts another tensor in {', '.join(moved)} while it runs, which a graph "
                               "cannot replay")


def _put_back(places: list[Read]) -> list[str]:
    """Puts each read's tensor back where it was found, if something else is there now; returns their labels."""
    moved = []
    for r in places:
        try:
            now = r.fetch()
        except Exception:  # noqa: BLE001 - the path to it is gone (a key deleted): nothing to put back through
            continue
        if now is not r.value:
            r.assign(r.value)
            moved.append(r.label)
    return moved


def _container_checks(g: GuardBuilder, r: Read) -> None:
    ty = g.const("T", type(r.value))
    g.check(f"type({r.var}) is not {ty}", "{label}: type changed from {old} to {new}", label=r.label,
            old=type(r.value).__name__, new=Live(f"type({r.var}).__name__"))
    if isinstance(r.value, dict):
        keys = list(r.value)
        g.check(f"list({r.var}) != {g.const('K', keys)}", "{label}: keys changed from {old} to {new}", label=r.label,
                old=keys, new=Live(f"list({r.var})"))
    elif isinstance(r.value, (set, frozenset)):
        g.check(f"{r.var} != {g.const('C', frozenset(r.value))}", "{label}: changed from {old} to {new}",
                label=r.label, old=sorted(map(shown, r.value)), new=Live(f"sorted(map(_shown, {r.var}))"))
    else:
        g.check(f"len({r.var}) != {g.literal('L', len(r.value))}", "{label}: length changed from {old} to {new}",
                label=r.label, old=len(r.value), new=Live(f"len({r.var})"))


# ---------------------------------------------------------------------------------------------- the walk


def find_reads(fn: Callable) -> Reads:
    """The values `fn` reads besides its arguments (see the module's docstring). Raises `CaptureError` past
    `MAX_READS` values."""
    walk = _Walk()
    if isinstance(fn, torch.nn.Module):
        walk.visit(Read(None, ("const", fn, "self"), fn, "module", "self"), frozenset())
    elif inspect.ismethod(fn):
        self_obj = fn.__self__
        kind = "module" if isinstance(self_obj, torch.nn.Module) else "object"
        root = Read(None, ("const", self_obj, "self"), self_obj, kind, "self")
        walk.add(root)
        walk.function(fn.__func__, root)
        if kind == "module":
            walk.module(root, frozenset())
    elif isinstance(fn, functools.partial):
        walk.function(fn.func, None)
    elif inspect.isfunction(fn):
        walk.function(fn, None)
    else:  # a callable object: its __call__, with the object as self
        root = Read(None, ("const", fn, "self"), fn, "object", "self")
        walk.add(root)
        walk.method(root, "__call__")
    return Reads(walk.found, root=function_of(fn), loaders=walk.loaders, walks=walk.walks)


class _Walk:
    def __init__(self) -> None:
        self.found: list[Read] = []
        self.roots: dict[tuple[int, str], Read] = {}  # (globals dict or cell, name) → its read: each visited once
        self.walked: set[tuple[int, int]] = set()  # (code, self object) pairs already walked
        self.added: set[int] = set()  # ids of the reads in `found`
        self.loaders: dict[int, set[int]] = {}  # id(root read) → ids of the code objects that load it
        self.walks: dict[int, int] = {}  # id(code) → how many times it was reached, from anywhere

    def add(self, r: Read) -> None:
        """Record `r`, after the parents it is reached through (a submodule's path is recorded only when needed)."""
        if r.parent is not None and id(r.parent) not in self.added:
            self.add(r.parent)
        if len(self.found) >= MAX_READS:
            raise CaptureError(f"the function reads more than {MAX_READS} values from globals and closures; pass "
                               f"large state as arguments")
        self.found.append(r)
        self.added.add(id(r))

    def function(self, fn: Any, self_read: Read | None) -> None:
        """Walk a user function: its closure cells, the globals its code loads and, with `self_read`, the
        attributes of `self` it loads."""
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is not None and wrapped is not fn:
            self.function(wrapped, self_read)
        code = getattr(fn, "__code__", None)
        if code is None or not is_user_code(code):
            return
        self.walks[id(code)] = self.walks.get(id(code), 0) + 1
        key = (id(code), id(self_read.value) if self_read is not None else 0)
        if key in self.walked:
            return
        self.walked.add(key)
        globals_, attrs = code_names(code)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # not bound yet
                continue
            self.root(("cell", cell, name), value, name, attrs, code)
        namespace = fn.__globals__
        for name in globals_:
            if name in namespace:
                self.root(("global", namespace, name), namespace[name], name, attrs, code)
        if self_read is not None:
            self.attributes(self_read, attrs)

    def root(self, step: tuple, value: Any, label: str, attrs: frozenset[str], loader: types.CodeType) -> None:
        """A global or closure cell that `loader`'s code loads."""
        key = (id(step[1]), step[2] if step[0] == "global" else "")
        known = self.roots.get(key)
        if known is None:
            r = Read(None, step, value, "", label)
            if not self.visit(r, attrs):
                return
            self.roots[key] = known = r
        elif known.kind in ("object", "module"):  # reached again from other code: the attributes it loads
            self.attributes(known, attrs)
        self.loaders.setdefault(id(known), set()).add(id(loader))

    def visit(self, r: Read, attrs: frozenset[str], depth: int = 0) -> bool:
        """Record `r` by its value's kind and go on into what the value holds. False when it is not worth a read."""
        v = r.value
        if depth > 32:
            raise CaptureError(f"{r.label}: values nested too deep to guard; pass them as arguments")
        if not isinstance(v, _SCALARS) and any(a.value is v for a in _ancestors(r)):
            r.kind = "object"  # a cycle: the identity guard says enough
            self.add(r)
            return True
        if isinstance(v, _SCALARS):
            r.kind = "value"
            self.add(r)
        elif isinstance(v, torch.Tensor):
            r.kind = "tensor"
            self.add(r)
        elif isinstance(v, torch.nn.Module):
            r.kind = "module"
            self.add(r)
            self.module(r, attrs, depth)
        elif type(v) in (list, tuple, dict, set, frozenset) or isinstance(v, tuple) and hasattr(v, "_fields"):
            r.kind = "container"
            self.add(r)
            if not isinstance(v, (set, frozenset)):
                for key, item in (v.items() if isinstance(v, dict) else enumerate(v)):
                    self.visit(Read(r, ("item", key), item, "", _item_label(r.label, key)), attrs, depth + 1)
        elif isinstance(v, types.ModuleType):
            if not user_module(v):
                return False  # a library: its globals are its business
            r.kind = "object"
            self.add(r)
            self.attributes(r, attrs, depth)
        else:
            r.kind = "object"
            self.add(r)
            if inspect.isfunction(v) or hasattr(v, "__wrapped__"):
                self.function(v, None)
            elif inspect.ismethod(v):
                self.function(v.__func__, None)
            elif isinstance(v, functools.partial):
                self.function(v.func, None)
            elif not isinstance(v, type) or user_module(sys.modules.get(v.__module__)):
                self.attributes(r, attrs, depth)
        return True

    def module(self, r: Read, attrs: frozenset[str], depth: int = 0) -> None:
        """A module: the attributes of it that the code reaching it loads, and the forward of it and of every
        submodule, walked with the submodule as self."""
        self.attributes(r, attrs, depth)
        for path, _ in r.value.named_modules():
            sub_read = r
            for name in path.split(".") if path else ():
                sub_read = Read(sub_read, ("module", name), sub_read.value._modules[name], "path",
                                f"{sub_read.label}.{name}")
            self.method(sub_read, "forward")

    def method(self, self_read: Read, name: str) -> None:
        fn = inspect.getattr_static(type(self_read.value), name, None)
        if isinstance(fn, (staticmethod, classmethod)):
            self.function(fn.__func__, None)
        elif isinstance(fn, property):
            self.function(fn.fget, self_read)
        elif inspect.isfunction(fn):
            self.function(fn, self_read)

    def attributes(self, r: Read, attrs: frozenset[str], depth: int = 0) -> None:
        """The attributes in `attrs` that `r`'s object holds in its own `__dict__`, and its methods named there."""
        try:
            own = getattr(r.value, "__dict__", None)
        except Exception:  # a `__dict__` property that raises: the identity guard is all there is
            return
        if not isinstance(own, (dict, types.MappingProxyType)):
            return
        is_type = isinstance(r.value, type)
        for name in sorted(attrs):
            if name in own and name != "training":  # a module's training flag is guarded by `ModuleState`
                value = own[name]
                if is_type and isinstance(value, (staticmethod, classmethod)):
                    self.function(value.__func__, None)
                elif not (is_type and isinstance(value, property)):
                    self.visit(Read(r, ("attr", name), value, "", f"{r.label}.{name}"), attrs, depth + 1)
            elif not is_type:
                self.method(r, name)


def _ancestors(r: Read) -> Iterator[Read]:
    while r.parent is not None:
        r = r.parent
        yield r


def _item_label(label: str, key: Any) -> str:
    return f"{label}[{key!r}]"
