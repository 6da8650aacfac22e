"""Reads the text form back: `parse_plan(format_plan(plan)) == plan`. Errors name the line."""

from __future__ import annotations

import ast
import re
from typing import Any

import sympy
import torch
from ember_core import (
    LAYOUTS,
    MEMORY_FORMATS,
    SHORT_DTYPE_NAMES,
    EmberError,
    Ref,
    Sym,
    Symbol,
    layout_problem,
    parse_integer,
    parse_python,
    resolve_op,
    to_dtype,
)

from ._errors import PlanError
from ._indexing import contiguous_strides
from ._loop_ir import (
    BUFFER_KINDS,
    DTYPE_LONG,
    IMPLICIT_CAST,
    NAN,
    Buffer,
    Dim,
    Extern,
    Instr,
    Item,
    Kernel,
    KernelPlan,
    Loop,
    Op,
    scalar_of,
)

_HEADER = re.compile(r"# ember kernel plan '(?P<name>[^']*)' on (?P<device>\S+)$")
_SYMBOL = re.compile(r"(\w+)=(-?\d+) in \[(-?\d+), (inf|-?\d+)\]")
_BUFFER = re.compile(r"(?P<name>\w+): (?P<dtype>\w+)\[(?P<shape>[^\]]*)\](\{(?P<stride>[^}]*)\})? (?P<kind>\w+)"
                     r"( (of|reuses) (?P<base>\w+))?( at (?P<offset>.+))?$")
_KERNEL = re.compile(r"kernel (?P<name>\w+)\[(?P<dims>.*)\]:(  # from (?P<origins>.*))?$")
_INSTR = re.compile(r"(?P<outs>\w+(, \w+)*): (?P<dtype>\w+) = (?P<op>\w+)( (?P<rest>.*))?$")
_ACCESS = re.compile(r"(?P<buffer>\w+)(?P<index>\[.*\])(?P<tail>.*)$")


MAX_TEXT_CHARS = 64 << 20  # a plan's text; longer is refused before reading
MAX_LINE_CHARS = 1 << 20
# The torch objects an extern argument may name, by their printed text (`torch.float32`): fixed tables, so that
# no attribute of torch is ever looked up by a name from the text.
TORCH_NAMES: dict[str, Any] = {
    str(obj).removeprefix("torch."): obj
    for obj in (*map(to_dtype, SHORT_DTYPE_NAMES), *LAYOUTS.values(), *MEMORY_FORMATS.values())
}


def parse_plan(text: str) -> KernelPlan:
    """The KernelPlan a text form describes. Text is untrusted: nothing in it is evaluated, and every way it can
    be wrong ends in a `PlanError` naming the line."""
    if len(text) > MAX_TEXT_CHARS:
        raise PlanError(f"plan text of {len(text)} characters is longer than the limit of {MAX_TEXT_CHARS}")
    parser = _Parser(text.splitlines())
    try:
        return parser.plan()
    except PlanError:
        raise
    except Exception as e:  # the boundary of untrusted text: whatever broke, say on which line
        raise parser.fail(f"{type(e).__name__}: {e}"[:300]) from None


class _Parser:
    def __init__(self, lines: list[str]):
        self.lines = lines
        self.pos = 0
        self.hints: dict[str, int] = {}  # each symbol's hint, for the buffers' sizes

    def fail(self, what: str) -> PlanError:
        line = self.lines[self.pos - 1] if 0 < self.pos <= len(self.lines) else ""
        return PlanError(f"line {self.pos}: {what}\n  {line[:200]}")

    def next(self) -> tuple[int, str]:
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            self.pos += 1
            if len(line) > MAX_LINE_CHARS:
                raise self.fail(f"line longer than {MAX_LINE_CHARS} characters")
            if line.strip():
                return (len(line) - len(line.lstrip(" "))) // 2, line.strip()
        raise self.fail("unexpected end of text")

    def peek_depth(self) -> int:
        for line in self.lines[self.pos:]:
            if line.strip():
                return (len(line) - len(line.lstrip(" "))) // 2
        return -1

    def plan(self) -> KernelPlan:
        _, line = self.next()
        m = _HEADER.match(line)
        if not m:
            raise self.fail("expected \"# ember kernel plan 'NAME' on DEVICE\"")
        passes: tuple[str, ...] = ()
        symbols: tuple[Symbol, ...] = ()
        _, line = self.next()
        while line.startswith("#"):
            if line.startswith("# passes: "):
                passes = tuple(line[len("# passes: "):].split(", "))
            elif line.startswith("# symbols: "):
                symbols = tuple(Symbol(n, int(h), int(lo), None if up == "inf" else int(up))
                                for n, h, lo, up in _SYMBOL.findall(line))
                self.hints = {s.name: s.hint for s in symbols}
            _, line = self.next()
        dm = re.match(r"def (\w+)\((.*)\):$", line)
        if not dm or dm.group(1) != m.group("name"):
            raise self.fail("expected 'def NAME(inputs):' naming the plan")
        inputs = tuple(split_top(dm.group(2)))
        buffers, steps, outputs = self.body()
        return KernelPlan(m.group("name"), tuple(buffers), tuple(steps), inputs, outputs, symbols, passes,
                          m.group("device"))

    def body(self):
        buffers, steps = [], []
        while True:
            depth, line = self.next()
            if depth != 1:
                raise self.fail("expected a statement of the plan (indent 2)")
            if line.startswith("return ("):
                outs = tuple(parse_output(o) for o in split_top(line[len("return ("):-1]))
                return buffers, steps, outs
            if line.startswith("kernel "):
                steps.append(self.kernel(line))
            elif line.startswith("extern "):
                steps.append(self.extern(line))
            else:
                buffers.append(self.buffer(line))

    def buffer(self, line: str) -> Buffer:
        m = _BUFFER.match(line)
        if not m:
            raise self.fail("expected 'NAME: DTYPE[SHAPE] KIND'")
        if m.group("kind") not in BUFFER_KINDS:
            raise self.fail(f"unknown buffer kind {m.group('kind')!r}; known: {', '.join(BUFFER_KINDS)}")
        shape = tuple(integer(d) for d in split_top(m.group("shape")))
        stride = tuple(integer(s) for s in split_top(m.group("stride"))) if m.group("stride") is not None \
            else contiguous_strides(shape)
        offset = integer(m.group("offset")) if m.group("offset") else sympy.Integer(0)
        self.check_layout(shape, stride, offset)
        return Buffer(m.group("name"), self.dtype(m.group("dtype")), shape, stride, m.group("kind"), offset,
                      m.group("base"))

    def check_layout(self, shape: tuple, stride: tuple, offset: sympy.Expr) -> None:
        """Sizes, strides and offset in [0, 2**63) at the symbols' hints, as ember-core checks a graph's values."""
        def dim(e: sympy.Expr) -> int | str:
            return int(e) if e.is_Integer else str(e)
        problem = layout_problem([dim(d) for d in shape], [dim(d) for d in stride], dim(offset), self.hints)
        if problem is not None:
            raise self.fail(f"buffer {problem[0]}: {problem[1]}")

    def dtype(self, short: str) -> str:
        if short not in DTYPE_LONG:
            raise self.fail(f"unknown dtype {short!r}")
        return DTYPE_LONG[short]

    def kernel(self, line: str) -> Kernel:
        m = _KERNEL.match(line)
        if not m:
            raise self.fail("expected 'kernel NAME[DIMS]:'")
        dims = []
        for d in split_top(m.group("dims")):
            v, _, size = d.partition(" < ")
            dims.append(Dim(v, integer(size)))
        origins = tuple(m.group("origins").split(", ")) if m.group("origins") else ()
        body: list = []
        while self.peek_depth() == 2:
            _, text = self.next()
            if text == "loop:":
                inner = []
                while self.peek_depth() == 3:
                    inner.append(self.instr(self.next()[1]))
                body.append(Loop(tuple(inner)))
            else:
                body.append(self.instr(text))
        return Kernel(m.group("name"), tuple(dims), tuple(body), origins)

    def instr(self, text: str) -> Instr:
        if text.startswith("store "):
            return self.store(text[len("store "):])
        m = _INSTR.match(text)
        if not m or Op.named(m.group("op")) is None:
            raise self.fail("expected 'NAMES: DTYPE = OP ARGS' or 'store BUFFER[INDEX] = VALUE'")
        op, dtype, outs, rest = Op(m.group("op")), self.dtype(m.group("dtype")), tuple(
            m.group("outs").split(", ")), m.group("rest") or ""
        if op is Op.LOAD:
            buffer, index, tail = self.access(rest)
            in_bounds = tail.startswith(" in bounds")
            tail = tail[len(" in bounds"):] if in_bounds else tail
            if not tail:
                return Instr(op, outs, dtype, (), buffer, index, in_bounds=in_bounds)
            mm = re.match(r" if (\w+) else (.+)$", tail)
            if not mm:
                raise self.fail("expected 'if MASK else VALUE' or 'in bounds' after a load")
            return Instr(op, outs, dtype, (mm.group(1),), buffer, index, parse_scalar(mm.group(2), dtype), in_bounds)
        if op is Op.CONST:
            return Instr(op, outs, dtype, value=parse_scalar(rest, dtype))
        if op is Op.INDEX:
            return Instr(op, outs, dtype, index=(integer(rest),))
        if op is Op.CAST and rest.endswith(" implicit"):
            return Instr(op, outs, dtype, (rest[:-len(" implicit")],), value=IMPLICIT_CAST)
        return Instr(op, outs, dtype, tuple(rest.split(", ")) if rest else ())

    def store(self, text: str) -> Instr:
        buffer, index, tail = self.access(text)
        mm = re.match(r" = (\w+)( if (\w+))?$", tail)
        if not mm:
            raise self.fail("expected 'store BUFFER[INDEX] = VALUE [if MASK]'")
        srcs = (mm.group(1),) + ((mm.group(3),) if mm.group(3) else ())
        return Instr(Op.STORE, (), "", srcs, buffer, index)

    def access(self, text: str) -> tuple[str, tuple, str]:
        m = _ACCESS.match(text)
        if not m:
            raise self.fail("expected BUFFER[INDEX]")
        inner, tail = _bracket(m.group("index") + m.group("tail"))
        return m.group("buffer"), tuple(integer(e) for e in split_top(inner)), tail

    def extern(self, line: str) -> Extern:
        m = re.match(r"extern (?P<outs>[\w, ]+) = (?P<op>[\w.]+)\((?P<args>.*)\)(  # from (?P<origins>.*))?$", line)
        if not m:
            raise self.fail("expected 'extern OUTS = OP(ARGS)'")
        try:
            resolve_op(m.group("op"))
        except EmberError as e:
            raise self.fail(str(e)) from None
        try:
            call = parse_python(f"f({m.group('args')})", mode="eval").body
            args = tuple(parse_arg(a) for a in call.args)
            kwargs = {k.arg: parse_arg(k.value) for k in call.keywords}
        except (SyntaxError, ValueError) as e:
            raise self.fail(f"bad extern arguments: {e}") from None
        origins = tuple(m.group("origins").split(", ")) if m.group("origins") else ()
        return Extern(tuple(m.group("outs").split(", ")), m.group("op"), args, kwargs, origins)


def integer(text: str) -> sympy.Expr:
    """An index, size or stride from the text: ember-core's grammar, its values integers (never evaluated)."""
    return parse_integer(text.strip(), "index")


def _bracket(text: str) -> tuple[str, str]:
    """'[a, b[c]] rest' → ('a, b[c]', ' rest')."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if depth == 0:
            return text[1:i], text[i + 1:]
    raise PlanError(f"unbalanced brackets in {text!r}")


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets and parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def parse_scalar(text: str, dtype: str) -> int | float | bool:
    text = text.strip()
    if dtype == "bool":
        return text == "True"
    return scalar_of(float(text) if dtype.startswith(("float", "bfloat")) else int(text), dtype)


def parse_output(text: str) -> Any:
    """A plan output: a buffer name, or `sym('EXPR')`."""
    value = parse_arg(parse_python(text, mode="eval").body)
    return value.name if isinstance(value, Ref) else value


_NAMED = {"inf": float("inf"), "nan": NAN, "None": None, "True": True, "False": False}


def parse_arg(node: ast.AST) -> Any:
    """One extern argument from its Python-like text (see `_printer.format_arg`)."""
    if isinstance(node, ast.Constant):
        return NAN if isinstance(node.value, float) and node.value != node.value else node.value
    if isinstance(node, ast.Name):
        return _NAMED[node.id] if node.id in _NAMED else Ref(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -parse_arg(node.operand)
    if isinstance(node, ast.List):
        return tuple(parse_arg(e) for e in node.elts)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        if node.attr in TORCH_NAMES:
            return TORCH_NAMES[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1 and \
            node.func.id == "item" and isinstance(node.args[0], ast.Name):
        return Item(node.args[0].id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
        text = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
        if node.func.id == "sym" and isinstance(text, str):
            integer(text)  # the grammar's check: ExprError for anything else
            return Sym(text)
        if node.func.id == "device" and isinstance(text, str):
            return torch.device(text)
    raise ValueError(f"cannot read argument {ast.unparse(node)!r}"[:200])
