"""Module state of a traced function: the parameters and buffers it reads, lifted as graph inputs, and their guards.

The modules come from the function itself (an `nn.Module`, or a bound method of one), else from its closure cells
and the globals its code names. Each tensor becomes a graph input of kind `param` or `buffer`; while tracing, the
module is reparametrized to read the fake input instead. The guard checks that every module, parameter and buffer
is still the same object, in the same training mode, with the same dtype, shape and requires_grad.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.utils.stateless import _reparametrize_module

from ._guards import GuardBuilder, Live


@dataclass
class Owner:
    """A module the function reads: `access` is the guard code that finds it again, `prefix` names its tensors."""

    module: torch.nn.Module
    prefix: str
    access: str  # Python code, in the guard's namespace
    namespace: dict[str, Any] = field(default_factory=dict)


def find_owners(fn: Callable) -> list[Owner]:
    """The modules whose state `fn` reads: itself, its `__self__`, or modules in its closure and globals."""
    if isinstance(fn, torch.nn.Module):
        return [Owner(fn, "", "ROOT", {"ROOT": fn})]
    self_obj = getattr(fn, "__self__", None)
    if isinstance(self_obj, torch.nn.Module):
        return [Owner(self_obj, "", "ROOT", {"ROOT": self_obj})]
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    owners = []
    for k, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or ())):
        with contextlib.suppress(ValueError):
            if isinstance(cell.cell_contents, torch.nn.Module):
                owners.append(Owner(cell.cell_contents, name, f"CELL{k}.cell_contents", {f"CELL{k}": cell}))
    for name in code.co_names:
        value = fn.__globals__.get(name)
        if isinstance(value, torch.nn.Module):
            owners.append(Owner(value, name, f"GLOBALS.get({name!r})", {"GLOBALS": fn.__globals__}))
    return owners


class ModuleState:
    """The lifted tensors of some modules, in graph-input order: parameters first, then buffers."""

    def __init__(self, owners: list[Owner]):
        self.owners = owners
        self.names: list[str] = []  # qualified: `fc.weight`, or `model.fc.weight` for a global `model`
        self.tensors: list[torch.Tensor] = []
        self.kinds: list[str] = []
        self._local: list[tuple[int, str]] = []  # (owner index, name inside that owner)
        for kind, getter in (("param", "named_parameters"), ("buffer", "named_buffers")):
            for j, owner in enumerate(owners):
                for name, t in getattr(owner.module, getter)():
                    self.names.append(f"{owner.prefix}.{name}" if owner.prefix else name)
                    self.tensors.append(t)
                    self.kinds.append(kind)
                    self._local.append((j, name))

    def __len__(self) -> int:
        return len(self.tensors)

    @contextlib.contextmanager
    def substituted(self, values: list[torch.Tensor]) -> Iterator[None]:
        """While inside, each module reads `values` (in `self.tensors` order) instead of its own tensors."""
        per_owner: list[dict[str, torch.Tensor]] = [{} for _ in self.owners]
        for (j, name), v in zip(self._local, values):
            per_owner[j][name] = v
        with contextlib.ExitStack() as stack:
            for owner, mapping in zip(self.owners, per_owner):
                stack.enter_context(_reparametrize_module(owner.module, mapping, tie_weights=True))
            yield

    def add_checks(self, g: GuardBuilder) -> None:
        """Checks that every module, parameter and buffer is the same object, mode and metadata as now."""
        lifted = {id(t): k for k, t in enumerate(self.tensors)}
        for j, owner in enumerate(self.owners):
            g.ns.update(owner.namespace)
            found: dict[str, str] = {}
            for path, module in owner.module.named_modules():
                var = f"m{j}_{len(found)}"
                parent, _, leaf = path.rpartition(".")
                g.let(var, owner.access if not path else f"{found[parent]}._modules.get({g.const('N', leaf)})")
                found[path] = var
                label = ".".join(p for p in (owner.prefix, path) if p) or type(module).__name__
                g.check(f"{var} is not {g.const('M', module)}", "module {label} was replaced", label=label)
                g.check(f"{var}.training is not {module.training}", "module {label}: training changed from {old} to "
                        "{new}", label=label, old=module.training, new=Live(f"{var}.training"))
                for attr in ("_parameters", "_buffers"):
                    for name, t in getattr(module, attr).items():
                        if id(t) in lifted:
                            self._tensor_checks(g, var, attr, name, t, self.names[lifted[id(t)]])

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
