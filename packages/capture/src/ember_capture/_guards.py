"""Guards of the `trace` frontend: generated Python, one function per compiled entry.

A `GuardBuilder` collects checks, each a condition that is true when the guard fails plus a reason in words
(a template of ember's, filled with constants and with `Live` values read on a miss: no user text becomes code).
From the same list it generates two functions: `check(flat, spec) -> bool`, the hot path (straight-line code, no
allocation beyond the locals), and `explain(flat, spec) -> str | None`, which runs only on a miss and returns the
first failing check's reason, e.g. `x: size of dim 0 changed from 10 to 8`. `readable()` gives each check for
people (`ember.explain`, the `guards_built` event): the condition that holds while the entry is used, with constants
shown by value and argument leaves by name, e.g. `x.size() == (10, 4)`.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP


@dataclass(frozen=True)
class Live:
    """A value read when a guard is explained: `code` is guard code over its locals, written by ember (never user
    text); the reason shows it with `str`, or `repr` when the template says `!r`."""

    code: str


class GuardBuilder:
    """Lines of guard code over `flat` (the argument leaves) and `spec` (their pytree structure).

    User data (argument values, dict keys, module names) never becomes code: it reaches the guard only as
    constants in its namespace, and reasons are assembled from constant text and `Live` values at explain time."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {**SYMPY_INTERP, "is_grad_enabled": torch.is_grad_enabled, "_size_diff": _size_diff,
                                   "_stride_diff": _stride_diff, "_reason": _reason,
                                   "_storage_of": storage_of}
        self.lines: list[tuple[str, str, str | None]] = []  # ("let", code, None) | ("check", condition, explain code)
        self.shown: dict[str, str] = {"spec": "argument_structure"}  # guard local or constant → how people read it

    def const(self, prefix: str, value: Any) -> str:
        """A name in the guard's namespace bound to `value`."""
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = value
        self.shown[name] = _shown(value)
        return name

    def let(self, var: str, expr: str, label: str | None = None) -> None:
        """A local of the guard; `label` is what it is called in `readable()` (the argument's name)."""
        self.lines.append(("let", f"{var} = {expr}", None))
        if label is not None:
            self.shown[var] = label

    def check(self, failed: str, template: str, **fields: Any) -> None:
        """`failed` is a condition that is true when the guard fails. The reason is `template` (ember's text) with
        its `{field}`s filled: a `Live` field is read when the guard is explained, any other is shown as it is now
        (`str`, or `repr` for `{field!r}`)."""
        parts: list[str | tuple[int, bool]] = []
        live: list[str] = []
        for literal, name, _, conversion in string.Formatter().parse(template):
            if literal:
                parts.append(literal)
            if name is None:
                continue
            value = fields[name]
            if isinstance(value, Live):
                parts.append((len(live), conversion == "r"))
                live.append(value.code)
            else:
                parts.append(repr(value) if conversion == "r" else str(value))
        explain = f"_reason({self.const('R', tuple(parts))}, ({''.join(c + ', ' for c in live)}))"
        self.lines.append(("check", failed, explain))

    def source(self, name: str = "guard") -> str:
        body = []
        for kind, code, _ in self.lines:
            body += [code] if kind == "let" else [f"if {code}:", "    return False"]
        return _function(name, body, "True", "False")

    def explain_source(self) -> str:
        body = []
        for kind, code, explain in self.lines:
            body += [code] if kind == "let" else [f"if {code}:", f"    return {explain}"]
        return _function("explain", body, "None", "'a guard raised'")

    def readable(self) -> list[str]:
        """Each check as the condition that holds while the guard passes (`x.dtype is torch.float32`), over the
        arguments' labels and the constants' values. For people only: it is never run."""
        return [_holding(code, self.shown) for kind, code, _ in self.lines if kind == "check"]

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


_NEGATED_COMPARISONS = {ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE,
                        ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In}


class _Renamer(ast.NodeTransformer):
    def __init__(self, shown: dict[str, str]):
        self.shown = shown

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(id=self.shown.get(node.id, node.id), ctx=node.ctx)


def _holding(failed: str, shown: dict[str, str]) -> str:
    """The negation of the guard condition `failed` (ember's generated code, never user text), printed with the
    names in `shown` replaced."""
    expr = _negated(ast.parse(failed, mode="eval").body)
    return ast.unparse(_Renamer(shown).visit(expr))


def _negated(e: ast.expr) -> ast.expr:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return e.operand
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _NEGATED_COMPARISONS:
        return ast.Compare(e.left, [_NEGATED_COMPARISONS[type(e.ops[0])]()], e.comparators)
    if isinstance(e, ast.BoolOp):  # De Morgan
        return ast.BoolOp(ast.And() if isinstance(e.op, ast.Or) else ast.Or(), [_negated(v) for v in e.values])
    return ast.UnaryOp(ast.Not(), e)


def _shown(value: Any) -> str:
    """A guard constant as `readable()` prints it: a short value, or the object's type."""
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"device({str(value)!r})"
    scalars = (type(None), bool, int, float, str)
    if isinstance(value, scalars) or type(value) in (tuple, frozenset) and all(isinstance(v, scalars) for v in value):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"<{type(value).__name__}>"


def storage_of(t: torch.Tensor) -> int:
    """A key equal for tensors over one storage; a tensor without one (a subclass wrapper) is its own."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return id(t)


def _reason(parts: tuple, live: tuple) -> str:
    """A failed check's reason: constant text, with the live values (index, as repr?) put in their places."""
    return "".join(p if isinstance(p, str) else repr(live[p[0]]) if p[1] else str(live[p[0]]) for p in parts)


def _function(name: str, body: list[str], ok: str, error: str) -> str:
    lines = [f"def {name}(flat, spec):", "    try:"] + [f"        {line}" for line in body]
    lines += ["    except Exception:", f"        return {error}", f"    return {ok}", ""]
    return "\n".join(lines)


def tensor_checks(g: GuardBuilder, var: str, label: str, t: torch.Tensor, kind: type) -> None:
    """Checks that `var` is a tensor of type `kind` like the fake `t`: dtype, device, requires_grad, rank, static
    sizes and strides. Symbolic sizes and strides are left to the shape environment's guards."""
    ty, dt, dev = g.const("T", kind), g.const("D", t.dtype), g.const("V", t.device)

    def changed(failed: str, what: str, old: Any, new: str) -> None:
        g.check(failed, "{label}: {what} changed from {old} to {new}", label=label, what=what, old=old, new=Live(new))

    changed(f"type({var}) is not {ty}", "type", kind.__name__, f"type({var}).__name__")
    changed(f"{var}.dtype is not {dt}", "dtype", t.dtype, f"{var}.dtype")
    changed(f"{var}.device != {dev}", "device", t.device, f"{var}.device")
    changed(f"{var}.requires_grad is not {t.requires_grad}", "requires_grad", t.requires_grad, f"{var}.requires_grad")
    changed(f"{var}.dim() != {t.dim()}", "number of dims", t.dim(), f"{var}.dim()")
    sizes, strides, offset = static_ints(t.shape), static_ints(t.stride()), static_ints([t.storage_offset()])[0]
    if None not in sizes and None not in strides and offset is not None:
        for what, expected in (("size", sizes), ("stride", strides)):
            g.check(f"{var}.{what}() != {tuple(expected)}", "{label}: {diff}", label=label,
                    diff=Live(f"_{what}_diff({var}.{what}(), {tuple(expected)})"))
        changed(f"{var}.storage_offset() != {offset}", "storage offset", offset, f"{var}.storage_offset()")
        return
    for d, n in enumerate(sizes):
        if n is not None:
            changed(f"{var}.size({d}) != {n}", f"size of dim {d}", n, f"{var}.size({d})")
    for d, n in enumerate(strides):
        if n is not None:
            changed(f"{var}.stride({d}) != {n}", f"stride of dim {d}", n, f"{var}.stride({d})")
    if offset is not None:
        changed(f"{var}.storage_offset() != {offset}", "storage offset", offset, f"{var}.storage_offset()")


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
    """Python scalars (and tuples of them) and other leaves: specialized by type and value (by identity for objects
    without value)."""
    scalars = (bool, int, float, str, torch.dtype, torch.device, torch.memory_format)
    if value is None or isinstance(value, scalars) or \
            type(value) is tuple and all(v is None or isinstance(v, scalars) for v in value):
        ty = g.const("T", type(value))
        failed = f"{var} is not None" if value is None else f"type({var}) is not {ty} or {var} != {g.const('C', value)}"
        g.check(failed, "{label}: changed from {old!r} to {new!r}", label=label, old=value, new=Live(var))
        return
    g.check(f"{var} is not {g.const('O', value)}", "{label}: is a different object", label=label)


def shape_env_checks(g: GuardBuilder, guards: list[str], names: dict[str, tuple[str, str]]) -> None:
    """The shape environment's guards (`L['t0'].size()[0] >= 2`, code torch prints from its own symbols), each
    rewritten over the guard's locals. `names` maps `t0` to (local variable, readable label)."""
    for expr in guards:
        code = re.sub(r"L\['(t\d+)'\]", lambda m: names[m.group(1)][0], expr)
        text = re.sub(r"L\['(t\d+)'\]", lambda m: names[m.group(1)][1], expr)
        g.check(f"not ({code})", "shape guard failed: {guard}", guard=text)
