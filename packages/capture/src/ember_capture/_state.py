"""Module state of a traced function: the parameters and buffers it reads, lifted as graph inputs, and their guards.

The modules come from the function itself (an `nn.Module`, or a bound method of one), else from what `find_reads`
finds in its closure cells and globals (a module in a global list is found by its path). Each tensor becomes a graph
input of kind `param` or `buffer`, once however many modules share it; while tracing, the module is reparametrized to
read the fake input instead. The guard checks that every module, parameter and buffer is still the same object, in
the same training mode, with the same dtype, shape and requires_grad. A module whose `forward` is not the user's
code (torch's `LeakyReLU`, `LayerNorm`, `Dropout`, ...) is not walked by `find_reads`, so the guard also checks every
public scalar attribute it holds (`negative_slope`, `eps`, `p`, `padding`) by value: its forward reads them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch.nn.utils.stateless import _reparametrize_module

from ._guards import GuardBuilder, Live, value_check
from ._reads import Owner, find_reads, is_user_code


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
        self._local: list[tuple[int, str, int]] = []  # (owner index, name inside that owner, tensor index)
        index: dict[int, int] = {}
        for kind, getter in (("param", "named_parameters"), ("buffer", "named_buffers")):
            for j, owner in enumerate(owners):
                for name, t in getattr(owner.module, getter)():
                    if id(t) not in index:  # a module inside another owner, or weights tied across owners
                        index[id(t)] = len(self.tensors)
                        self.names.append(f"{owner.prefix}.{name}" if owner.prefix else name)
                        self.tensors.append(t)
                        self.kinds.append(kind)
                    self._local.append((j, name, index[id(t)]))

    def __len__(self) -> int:
        return len(self.tensors)

    @contextlib.contextmanager
    def substituted(self, values: list[torch.Tensor]) -> Iterator[None]:
        """While inside, each module reads `values` (in `self.tensors` order) instead of its own tensors."""
        per_owner: list[dict[str, torch.Tensor]] = [{} for _ in self.owners]
        for j, name, k in self._local:
            per_owner[j][name] = values[k]
        with contextlib.ExitStack() as stack:
            for owner, mapping in zip(self.owners, per_owner):
                stack.enter_context(_reparametrize_module(owner.module, mapping, tie_weights=True))
            yield

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
                g.check(f"{var}.training is not {module.training}", "module {label}: training changed from {old} to "
                        "{new}", label=label, old=module.training, new=Live(f"{var}.training"))
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
        p = g.const("P", t)
        g.check(f"{var}.{attr}.get({g.const('N', name)}) is not {p}", "{kind} {label} was replaced by another tensor",
                kind=kind, label=label)
        for what, failed, old, new in (
            ("requires_grad", f"{p}.requires_grad is not {t.requires_grad}", t.requires_grad, f"{p}.requires_grad"),
            ("dtype", f"{p}.dtype is not {g.const('D', t.dtype)}", t.dtype, f"{p}.dtype"),
            ("shape", f"{p}.size() != {tuple(t.shape)}", list(t.shape), f"list({p}.shape)"),
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
