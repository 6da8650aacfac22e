"""Guards of the `trace` frontend: generated Python, one function per compiled entry.

A `GuardBuilder` collects checks, each a condition that is true when the guard fails plus a reason in words.
From the same list it generates two functions: `check(flat, spec) -> bool`, the hot path (straight-line code, no
allocation beyond the locals), and `explain(flat, spec) -> str | None`, which runs only on a miss and returns the
first failing check's reason, e.g. `x: size of dim 0 changed from 10 to 8`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP


class GuardBuilder:
    """Lines of guard code over `flat` (the argument leaves) and `spec` (their pytree structure)."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {**SYMPY_INTERP, "is_grad_enabled": torch.is_grad_enabled, "_size_diff": _size_diff,
                                   "_stride_diff": _stride_diff}
        self.lines: list[tuple[str, str, str | None]] = []  # ("let", code, None) | ("check", condition, reason)

    def const(self, prefix: str, value: Any) -> str:
        """A name in the guard's namespace bound to `value`."""
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = value
        return name

    def let(self, var: str, expr: str) -> None:
        self.lines.append(("let", f"{var} = {expr}", None))

    def check(self, failed: str, reason: str) -> None:
        """`failed` is a condition that is true when the guard fails; `reason` an f-string body saying why."""
        self.lines.append(("check", failed, reason))

    def source(self, name: str = "guard") -> str:
        body = []
        for kind, code, reason in self.lines:
            body += [code] if kind == "let" else [f"if {code}:  # {reason}", "    return False"]
        return _function(name, body, "True", "False")

    def explain_source(self) -> str:
        body = []
        for kind, code, reason in self.lines:
            body += [code] if kind == "let" else [f"if {code}:", f"    return f{reason!r}"]
        return _function("explain", body, "None", "'a guard raised'")

    def build(self) -> tuple[Callable[[list, Any], bool], Callable[[list, Any], str | None], str]:
        """(check, explain, source of check)."""
        src = self.source()
        ns = dict(self.ns)
        exec(compile(src, "<ember guard>", "exec"), ns)
        exec(compile(self.explain_source(), "<ember guard explain>", "exec"), ns)
        check, explain = ns["guard"], ns["explain"]

        def explain_safely(flat: list, spec: Any) -> str | None:
            try:
                return explain(flat, spec)
            except Exception as e:  # a guard that raises is a failed guard; say which
                return f"guard raised {type(e).__name__}: {e}"

        return check, explain_safely, src


def _function(name: str, body: list[str], ok: str, error: str) -> str:
    lines = [f"def {name}(flat, spec):", "    try:"] + [f"        {line}" for line in body]
    lines += ["    except Exception:", f"        return {error}", f"    return {ok}", ""]
    return "\n".join(lines)


def tensor_checks(g: GuardBuilder, var: str, label: str, t: torch.Tensor, kind: type) -> None:
    """Checks that `var` is a tensor of type `kind` like the fake `t`: dtype, device, requires_grad, rank, static
    sizes and strides. Symbolic sizes and strides are left to the shape environment's guards."""
    ty, dt, dev = g.const("T", kind), g.const("D", t.dtype), g.const("V", t.device)
    g.check(f"type({var}) is not {ty}", f"{label}: type changed from {kind.__name__} to {{type({var}).__name__}}")
    g.check(f"{var}.dtype is not {dt}", f"{label}: dtype changed from {t.dtype} to {{{var}.dtype}}")
    g.check(f"{var}.device != {dev}", f"{label}: device changed from {t.device} to {{{var}.device}}")
    g.check(f"{var}.requires_grad is not {t.requires_grad}",
            f"{label}: requires_grad changed from {t.requires_grad} to {{{var}.requires_grad}}")
    g.check(f"{var}.dim() != {t.dim()}", f"{label}: number of dims changed from {t.dim()} to {{{var}.dim()}}")
    sizes, strides, offset = static_ints(t.shape), static_ints(t.stride()), static_ints([t.storage_offset()])[0]
    if None not in sizes and None not in strides and offset is not None:
        g.check(f"{var}.size() != {tuple(sizes)}", _first_diff(var, label, "size", sizes))
        g.check(f"{var}.stride() != {tuple(strides)}", _first_diff(var, label, "stride", strides))
        g.check(f"{var}.storage_offset() != {offset}",
                f"{label}: storage offset changed from {offset} to {{{var}.storage_offset()}}")
        return
    for d, n in enumerate(sizes):
        if n is not None:
            g.check(f"{var}.size({d}) != {n}", f"{label}: size of dim {d} changed from {n} to {{{var}.size({d})}}")
    for d, n in enumerate(strides):
        if n is not None:
            g.check(f"{var}.stride({d}) != {n}",
                    f"{label}: stride of dim {d} changed from {n} to {{{var}.stride({d})}}")
    if offset is not None:
        g.check(f"{var}.storage_offset() != {offset}",
                f"{label}: storage offset changed from {offset} to {{{var}.storage_offset()}}")


def _first_diff(var: str, label: str, what: str, expected: list[int]) -> str:
    """An f-string naming the first dim whose size (or stride) differs from `expected`."""
    return f"{label}: {{_{what}_diff({var}.{what}(), {tuple(expected)})}}"


def _size_diff(got: tuple, expected: tuple) -> str:
    return _diff(got, expected, "size")


def _stride_diff(got: tuple, expected: tuple) -> str:
    return _diff(got, expected, "stride")


def _diff(got: tuple, expected: tuple, what: str) -> str:
    for d, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return f"{what} of dim {d} changed from {a} to {b}"
    return f"{what} changed from {list(expected)} to {list(got)}"


def static_ints(dims: Any) -> list[int | None]:
    """Each dim as an int, or None where it is symbolic."""
    out: list[int | None] = []
    for d in dims:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            out.append(int(expr) if expr.is_number else None)
        else:
            out.append(int(d))
    return out


def value_check(g: GuardBuilder, var: str, label: str, value: Any) -> None:
    """Python scalars and other leaves: specialized by type and value (by identity for objects without value)."""
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.memory_format)):
        ty = g.const("T", type(value))
        if value is None:
            g.check(f"{var} is not None", f"{label}: changed from None to {{{var}!r}}")
            return
        g.check(f"type({var}) is not {ty} or {var} != {g.const('C', value)}",
                f"{label}: changed from {value!r} to {{{var}!r}}")
        return
    g.check(f"{var} is not {g.const('O', value)}", f"{label}: is a different object")


def shape_env_checks(g: GuardBuilder, guards: list[str], names: dict[str, tuple[str, str]]) -> None:
    """The shape environment's guards (`L['t0'].size()[0] >= 2`), each rewritten over the guard's locals.
    `names` maps `t0` to (local variable, readable label)."""
    for expr in guards:
        code = re.sub(r"L\['(t\d+)'\]", lambda m: names[m.group(1)][0], expr)
        text = re.sub(r"L\['(t\d+)'\]", lambda m: names[m.group(1)][1], expr)
        g.check(f"not ({code})", "shape guard failed: " + text.replace("{", "{{").replace("}", "}}"))

