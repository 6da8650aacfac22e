"""Module state of a traced function: the parameters and buffers it reads, lifted as graph inputs, and their guards.

The modules come from the function itself (an `nn.Module`, or a bound method of one), else from what `find_reads`
finds in its closure cells and globals (a module in a global list is found by its path). Each tensor becomes a graph
input of kind `param` or `buffer`, once however many modules share it. While tracing, the function reads the fake
input in its place through `StandIns` (`pairs`), a per-thread torch function mode: the modules themselves are never
changed, so other threads calling them eagerly see their own tensors. A function that assigns a new tensor to a
parameter or a buffer while it runs (`self.total = self.total + x`) cannot be a graph; `kept` puts the old one back
and refuses the trace (the function runs eagerly, as eager would assign it).

The guard checks that every module, parameter and buffer is still the same object, in the same training mode, with
the same dtype, shape and requires_grad. `training` is whatever the user assigned: a real bool is checked with
`is True`/`is False`, anything else by identity, never by its text. A module whose `forward` is not the user's
code (torch's `LeakyReLU`, `LayerNorm`, `Dropout`, ...) is not walked by `find_reads`, so the guard also checks every
public scalar attribute it holds (`negative_slope`, `eps`, `p`, `padding`) by value: its forward reads them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from ._errors import CaptureError
from ._guards import GuardBuilder, Live, Metadata, value_check
from ._reads import Owner, find_reads
from ._user_code import is_user_code


def find_owners(fn: Callable) -> list[Owner]:
    """The modules whose state `fn` reads: itself, its `__self__`, or modules reached from its globals and closure
    (in lists and dicts too, and through the helpers it calls): see `find_reads`."""
    return find_reads(fn).owners


class ModuleState:
    """The lifted tensors of some modules, in graph-input order: parameters first, then buffers."""

    def __init__(self, owners: list[Owner]):
        self.owners = owners
        self.names: list[str] = []  # qualified: `fc.weight`, or `model.fc.weight` for a global `model`
        self.tensors: list[torch.Tensor] = []
        self.kinds: list[str] = []
        seen: set[int] = set()
        for kind, getter in (("param", "named_parameters"), ("buffer", "named_buffers")):
            for owner in owners:
                for name, t in getattr(owner.module, getter)():
                    if id(t) not in seen:  # a module inside another owner, or weights tied across owners
                        seen.add(id(t))
                        self.names.append(f"{owner.prefix}.{name}" if owner.prefix else name)
                        self.tensors.append(t)
                        self.kinds.append(kind)

    def __len__(self) -> int:
        return len(self.tensors)

    def pairs(self, values: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(tensor, its stand-in from `values`, in `self.tensors` order), for `StandIns`."""
        return list(zip(self.tensors, values))

    def modules(self) -> dict[int, tuple[str, torch.nn.Module]]:
        """Every module of every owner, once, with its qualified name."""
        found: dict[int, tuple[str, torch.nn.Module]] = {}
        for owner in self.owners:
            for path, m in owner.module.named_modules():
                found.setdefault(id(m), (".".join(p for p in (owner.prefix, path) if p), m))
        return found

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """While inside, the function may assign the modules' tensors; on the way out, every parameter, buffer and
        tensor attribute it replaced is put back, and `CaptureError` says which (after an error inside, they are put
        back and the error goes on)."""
        before = [_TensorSlots(name, m) for name, m in self.modules().values()]
        try:
            yield
        except BaseException:
            for slots in before:
                slots.restore()
            raise
        replaced = [name for slots in before for name in slots.restore()]
        if replaced:
            raise CaptureError(f"the function assigns {', '.join(replaced)} while it runs (a new tensor for a "
                               "parameter, a buffer or a tensor attribute of a module), which a graph cannot replay")

    def add_checks(self, g: GuardBuilder) -> None:
        """Checks that every module, parameter and buffer is the same object, mode and metadata as now."""
        lifted = {id(t): k for k, t in enumerate(self.tensors)}
        for j, owner in enumerate(self.owners):
            found: dict[str, str] = {}
            for path, module in owner.module.named_modules():
                var = f"m{j}_{len(found)}"
                parent, _, leaf = path.rpartition(".")
                label = ".".join(p for p in (owner.prefix, path) if p) or type(module).__name__
                g.let(var, owner.read.var if not path else f"{found[parent]}._modules.get({g.const('N', leaf)})",
                      label)
                found[path] = var
                g.check(f"{var} is not {g.const('M', module)}", "module {label} was replaced", label=label)
                g.check(f"{var}.training is not {g.literal('B', module.training)}", "module {label}: training changed "
                        "from {old} to {new}", label=label, old=module.training, new=Live(f"{var}.training"))
                for attr in ("_parameters", "_buffers"):
                    for name, t in getattr(module, attr).items():
                        if id(t) in lifted:
                            self._tensor_checks(g, var, attr, name, t, self.names[lifted[id(t)]])
                if not _walked(module):
                    for name, value in vars(module).items():
                        if not name.startswith("_") and name != "training" and _is_plain(value):
                            value_check(g, f"{var}.__dict__.get({g.const('N', name)})", f"{label}.{name}", value)

    @staticmethod
    def _tensor_checks(g: GuardBuilder, var: str, attr: str, name: str, t: torch.Tensor, label: str) -> None:
        kind = "parameter" if attr == "_parameters" else "buffer"
        p, m = g.const("P", t), Metadata(t)
        g.check(f"{var}.{attr}.get({g.const('N', name)}) is not {p}", "{kind} {label} was replaced by another tensor",
                kind=kind, label=label)
        for what, failed, old, new in (
            ("requires_grad", f"{p}.requires_grad is not {g.literal('B', m.requires_grad)}", m.requires_grad,
             f"{p}.requires_grad"),
            ("dtype", f"{p}.dtype is not {g.const('D', m.dtype)}", m.dtype, f"{p}.dtype"),
            ("shape", f"{p}.size() != {g.literal('S', m.sizes)}", list(m.sizes), f"list({p}.size())"),
        ):
            g.check(failed, "{kind} {label}: {what} changed from {old} to {new}", kind=kind, label=label, what=what,
                    old=old, new=Live(new))


_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.memory_format)


def _is_plain(value: object) -> bool:
    """A scalar, or a tuple of them (`padding=(1, 1)`, `normalized_shape`): guarded by value."""
    if isinstance(value, tuple):
        return all(isinstance(v, _PLAIN) for v in value)
    return isinstance(value, _PLAIN)


def _walked(module: torch.nn.Module) -> bool:
    """Whether `find_reads` walks the module's forward (user code), and so guards what it reads."""
    forward = getattr(type(module).forward, "__code__", None)
    return forward is not None and is_user_code(forward)


_MISSING = object()  # a slot that is not there, unlike one that holds None (`bias=False`)


class _TensorSlots:
    """A module's parameters, buffers and tensor attributes as they were, to put back after a trace."""

    def __init__(self, name: str, module: torch.nn.Module):
        self.name, self.module = name, module
        self.parameters, self.buffers = dict(module._parameters), dict(module._buffers)
        self.attributes = {k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor)}

    def restore(self) -> list[str]:
        """Puts back what changed (through `setattr`, so a module that keeps derived state, an RNN's
        `_flat_weights`, sees it put back too); returns its names."""
        changed = []
        for slots, before in ((self.module._parameters, self.parameters), (self.module._buffers, self.buffers)):
            for k in [k for k in {*slots, *before} if slots.get(k, _MISSING) is not before.get(k, _MISSING)]:
                changed.append(k)
                if k in before:
                    setattr(self.module, k, before[k])
                else:
                    del slots[k]
        own = vars(self.module)
        for k in [k for k, v in own.items() if isinstance(v, torch.Tensor) and self.attributes.get(k) is not v]:
            changed.append(k)
            if k in self.attributes:
                own[k] = self.attributes[k]
            else:
                del own[k]
        return [f"{self.name}.{k}" if self.name else k for k in sorted(changed)]
