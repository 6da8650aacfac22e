"""Guards of the `trace` frontend: generated Python, one function per compiled entry.

A `GuardBuilder` collects checks, each a condition that is true when the guard fails plus a reason in words
(a template of ember's, filled with constants and with `Live` values read on a miss: no user text becomes code).
From the same list it generates two functions: `check(flat, spec) -> bool`, the hot path (straight-line code, no
allocation beyond the locals), and `explain(flat, spec) -> str | None`, which runs only on a miss and returns the
first failing check's reason, e.g. `x: size of dim 0 changed from 10 to 8`. `readable()` gives each check for
people (`ember.explain`, the `guards_built` event): the condition that holds while the entry is used, with constants
shown by value and argument leaves by name, e.g. `x.size() == (10, 4)`.

No value of the user's program is ever printed into the code: a module's `training`, a tensor's `requires_grad` or
sizes are read from objects the user controls, and their text (`repr`, `format`) can be anything, code included.
A value reaches the code as text only when it is None, a real `bool` or `int`, or a tuple of them (`literal`), whose
text is Python's own; any other value is a constant of the guard's namespace. As a second line of defence every
line of code is parsed when it is added and refused (`GuardCodeError`, the function then runs eagerly) unless it is
made of the few forms ember writes: its locals, its constants, a short list of builtins and attributes.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from ember_core import autocast_state, parse_python
from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

from ._errors import CaptureError


class GuardCodeError(CaptureError):
    """A line of guard code that is not one of the forms ember writes: never run, the function runs eagerly."""


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
        self.ns: dict[str, Any] = {**SYMPY_INTERP, "is_grad_enabled": torch.is_grad_enabled,
                                   "get_default_dtype": torch.get_default_dtype,
                                   "get_default_device": torch.get_default_device,
                                   "autocast_state": autocast_state, "_autocast_text": autocast_text,
                                   "_size_diff": _size_diff,
                                   "_stride_diff": _stride_diff, "_reason": _reason, "_shown": shown,
                                   "_storage_of": storage_of}
        self.lines: list[tuple[str, str, str | None]] = []  # ("let", code, None) | ("check", condition, explain code)
        self.shown: dict[str, str] = {"spec": "argument_structure"}  # guard local or constant → how people read it
        self.locals: set[str] = {"flat", "spec"}

    def const(self, prefix: str, value: Any) -> str:
        """A name in the guard's namespace bound to `value`."""
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = value
        self.shown[name] = shown(value)
        return name

    def literal(self, prefix: str, value: Any) -> str:
        """Code for `value`: its own text when that text is Python's (None, a real bool or int, a tuple of them),
        else a constant (`const`). `t.requires_grad` and `module.training` are any object a user assigned."""
        return repr(value) if _is_literal(value) else self.const(prefix, value)

    def let(self, var: str, expr: str, label: str | None = None) -> None:
        """A local of the guard; `label` is what it is called in `readable()` (the argument's name)."""
        if not var.isidentifier() or var in self.ns:
            raise GuardCodeError(f"guard local {var!r} is not a fresh name")
        self._vetted(expr)
        self.locals.add(var)
        self.lines.append(("let", f"{var} = {expr}", None))
        if label is not None:
            self.shown[var] = label

    def check(self, failed: str, template: str, **fields: Any) -> None:
        """`failed` is a condition that is true when the guard fails. The reason is `template` (ember's text) with
        its `{field}`s filled: a `Live` field is read when the guard is explained, any other is shown as it is now
        (`str`, or `repr` for `{field!r}`)."""
        self._vetted(failed)
        parts: list[str | tuple[int, bool]] = []
        live: list[str] = []
        for literal, name, _, conversion in string.Formatter().parse(template):
            if literal:
                parts.append(literal)
            if name is None:
                continue
            value = fields[name]
            if isinstance(value, Live):
                self._vetted(value.code)
                parts.append((len(live), conversion == "r"))
                live.append(value.code)
            else:
                parts.append(_text(value, conversion == "r"))
        explain = f"_reason({self.const('R', tuple(parts))}, ({''.join(c + ', ' for c in live)}))"
        self.lines.append(("check", failed, explain))

    def _vetted(self, code: str) -> None:
        """Refuses code that is not made of the forms ember writes (see the module's docstring)."""
        problem = _unvetted(code, self.locals | self.ns.keys())
        if problem is not None:
            raise GuardCodeError(f"ember refused to build a guard: {problem} in generated code {code[:200]!r}")

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
    expr = _negated(parse_python(failed, mode="eval").body)
    return ast.unparse(_Renamer(shown).visit(expr))


def _negated(e: ast.expr) -> ast.expr:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return e.operand
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _NEGATED_COMPARISONS:
        return ast.Compare(e.left, [_NEGATED_COMPARISONS[type(e.ops[0])]()], e.comparators)
    if isinstance(e, ast.BoolOp):  # De Morgan
        return ast.BoolOp(ast.And() if isinstance(e.op, ast.Or) else ast.Or(), [_negated(v) for v in e.values])
    return ast.UnaryOp(ast.Not(), e)


def autocast_text(state: tuple[tuple[str, torch.dtype], ...]) -> str:
    """`autocast_state()` for people: `off`, or `cpu bfloat16, cuda float16`."""
    return ", ".join(f"{d} {str(t).removeprefix('torch.')}" for d, t in state) or "off"


def shown(value: Any) -> str:
    """A guard constant as `readable()` prints it: a short value, or the object's type. Only values of builtin
    types are printed by value: a user's `__repr__` is neither called nor trusted."""
    if isinstance(value, type):
        return value.__name__
    if type(value) is torch.dtype:
        return str(value)
    if type(value) is torch.device:
        return f"device({str(value)!r})"
    if _is_plain(value):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"<{type(value).__name__}>"


_PLAIN_TYPES = (type(None), bool, int, float, str)
_TORCH_TYPES = (torch.dtype, torch.device, torch.memory_format, torch.layout)


def _is_plain(value: Any, depth: int = 0) -> bool:
    """Builtin scalars, and tuples, lists and frozensets of them (exact types): their text is Python's own."""
    if type(value) in _PLAIN_TYPES:
        return True
    return depth < 4 and type(value) in (tuple, list, frozenset) and all(_is_plain(v, depth + 1) for v in value)


def _is_literal(value: Any) -> bool:
    """None, a bool, an int (exact types), or a tuple of them: values whose `repr` is code that rebuilds them."""
    if value is None or type(value) in (bool, int):
        return True
    return type(value) is tuple and len(value) <= 64 and all(v is None or type(v) in (bool, int) for v in value)


def _text(value: Any, as_repr: bool) -> str:
    """A value of a reason's template, as text: ember's own values and builtin ones by `str`/`repr`, any other by its
    type's name (so building a guard never calls a user's `__str__`, which may raise or take long)."""
    if _is_plain(value) or type(value) in _TORCH_TYPES:
        return repr(value) if as_repr else str(value)
    return f"<{type(value).__name__}>"


# What generated guard code is made of. Anything else is refused by `_unvetted`, whatever produced it.
_NODES = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.Compare, ast.BoolOp, ast.UnaryOp,
          ast.BinOp, ast.IfExp, ast.Subscript, ast.Constant, ast.Tuple, ast.List, ast.cmpop, ast.boolop, ast.unaryop,
          ast.operator)
_BUILTINS = frozenset({"type", "len", "list", "tuple", "sorted", "map", "repr", "str", "int", "float", "bool", "abs",
                       "min", "max", "round"})
_ATTRIBUTES = frozenset({"size", "stride", "storage_offset", "dim", "dtype", "device", "requires_grad", "training",
                         "is_neg", "is_conj",
                         "shape", "get", "cell_contents", "_modules", "_parameters", "_buffers", "__dict__",
                         "__name__"})


def _unvetted(code: str, names: set[str]) -> str | None:
    """What in `code` (one expression) is not a form of guard code, or None. `names` are the guard's locals and
    constants; torch's shape guards may also call `math` and `torch.sym_*` functions."""
    try:
        tree = parse_python(code, mode="eval")
    except SyntaxError:
        return "a syntax error"
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            return f"a {type(node).__name__} expression"
        if isinstance(node, ast.Name) and node.id not in names and node.id not in _BUILTINS:
            return f"the unknown name {node.id!r}"
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float, bool, type(None)):
            return f"a {type(node.value).__name__} literal"
        if isinstance(node, ast.Attribute) and not _known_attribute(node):
            return f"the attribute {node.attr!r}"
    return None


def _known_attribute(node: ast.Attribute) -> bool:
    owner = node.value.id if isinstance(node.value, ast.Name) else None
    if owner == "math":
        return not node.attr.startswith("_")
    if owner == "torch":
        return node.attr.startswith("sym_")
    return node.attr in _ATTRIBUTES


def storage_of(t: torch.Tensor) -> int:
    """A key equal for tensors over one storage; a tensor without one (a subclass wrapper) is its own."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return id(t)


def _reason(parts: tuple, live: tuple) -> str:
    """A failed check's reason: constant text, with the live values (index, as repr?) put in their places (as
    `_text` shows them: a value of the user's own type by its type's name)."""
    return "".join(p if isinstance(p, str) else _text(live[p[0]], p[1]) for p in parts)


def _function(name: str, body: list[str], ok: str, error: str) -> str:
    lines = [f"def {name}(flat, spec):", "    try:"] + [f"        {line}" for line in body]
    lines += ["    except Exception:", f"        return {error}", f"    return {ok}", ""]
    return "\n".join(lines)


def tensor_checks(g: GuardBuilder, var: str, label: str, t: torch.Tensor, kind: type) -> None:
    """Checks that `var` is a tensor of type `kind` like `t` (a fake, or the tensor itself): dtype, device,
    requires_grad, its negative and conjugate bits, rank, static sizes and strides. Symbolic sizes and strides are
    left to the shape environment's guards. `t`'s metadata is read as torch keeps it (`Metadata`), not through a
    subclass's Python overrides."""
    ty, m = g.const("T", kind), Metadata(t)
    dt, dev = g.const("D", m.dtype), g.const("V", m.device)

    def changed(failed: str, what: str, old: Any, new: str) -> None:
        g.check(failed, "{label}: {what} changed from {old} to {new}", label=label, what=what, old=old, new=Live(new))

    changed(f"type({var}) is not {ty}", "type", kind.__name__, f"type({var}).__name__")
    changed(f"{var}.dtype is not {dt}", "dtype", m.dtype, f"{var}.dtype")
    changed(f"{var}.device != {dev}", "device", m.device, f"{var}.device")
    changed(f"{var}.requires_grad is not {g.literal('B', m.requires_grad)}", "requires_grad", m.requires_grad,
            f"{var}.requires_grad")
    # a negated or conjugated view compiles apart (its graph runs where ATen applies the bit: ember_runtime)
    changed(f"{var}.is_neg() is not {g.literal('B', m.neg)}", "negative bit", m.neg, f"{var}.is_neg()")
    if m.dtype.is_complex:  # only a complex tensor has a conjugate bit
        changed(f"{var}.is_conj() is not {g.literal('B', m.conj)}", "conjugate bit", m.conj, f"{var}.is_conj()")
    changed(f"{var}.dim() != {g.literal('I', len(m.sizes))}", "number of dims", len(m.sizes), f"{var}.dim()")
    sizes, strides, offset = static_ints(m.sizes), static_ints(m.strides), static_ints([m.offset])[0]
    if None not in sizes and None not in strides and offset is not None:
        for what, expected in (("size", g.literal("S", tuple(sizes))), ("stride", g.literal("S", tuple(strides)))):
            g.check(f"{var}.{what}() != {expected}", "{label}: {diff}", label=label,
                    diff=Live(f"_{what}_diff({var}.{what}(), {expected})"))
        changed(f"{var}.storage_offset() != {g.literal('I', offset)}", "storage offset", offset,
                f"{var}.storage_offset()")
        return
    for d, n in enumerate(sizes):
        if n is not None:
            changed(f"{var}.size({d}) != {g.literal('I', n)}", f"size of dim {d}", n, f"{var}.size({d})")
    for d, n in enumerate(strides):
        if n is not None:
            changed(f"{var}.stride({d}) != {g.literal('I', n)}", f"stride of dim {d}", n, f"{var}.stride({d})")
    if offset is not None:
        changed(f"{var}.storage_offset() != {g.literal('I', offset)}", "storage offset", offset,
                f"{var}.storage_offset()")


class Metadata:
    """A tensor's metadata as torch keeps it: read through `torch._C.TensorBase`, with subclasses' Python-level
    overrides (`__torch_function__`, a `shape` property) set aside, so every value is torch's own (a bool, ints or
    symbolic ints, a dtype, a device)."""

    def __init__(self, t: torch.Tensor):
        base = torch._C.TensorBase
        with torch._C.DisableTorchFunctionSubclass():
            self.dtype = base.dtype.__get__(t)
            self.device = base.device.__get__(t)
            self.requires_grad = base.requires_grad.__get__(t)
            self.neg, self.conj = base.is_neg(t), base.is_conj(t)
            self.sizes = tuple(base.size(t))
            self.strides = tuple(base.stride(t))
            self.offset = base.storage_offset(t)


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
    """Each dim as an int, or None where it is symbolic. Dims are torch's (ints or SymInts); anything else is
    refused rather than converted by its own `__int__`."""
    out: list[int | None] = []
    for d in dims:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            out.append(int(expr) if expr.is_number else None)
        elif type(d) is int:
            out.append(d)
        else:
            raise GuardCodeError(f"a tensor dimension is a {type(d).__name__}, not an int")
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
        g.check(f"not ({code})", "shape guard failed: {guard}", guard=text)  # vetted there, like every check
