"""A cursor over one line of graph text: the grammar's lexical pieces (names, strings, numbers, sizes), each read
or refused with a `SchemaError` that names the line and the field and points at the column.

Nothing is evaluated: strings are JSON's string syntax (read by `json`), numbers are checked against a pattern
and the integer limits of `_json.py` before conversion, and sizes go through `_expr.py`'s grammar."""

from __future__ import annotations

import json
import re

from .._errors import SchemaError
from ._expr import ExprError, parse_integer
from ._json import MAX_INT_DIGITS
from ._printer import IDENT, INT_TEXT

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NUMBER = re.compile(r"-?(?:inf|nan|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)")
_NAME_CHAR = re.compile(r"[A-Za-z0-9_.]")
MAX_NUMBER_CHARS = 100  # a float literal; Python's repr needs at most 24
_SHOWN = 120  # characters of the line an error shows


class Cursor:
    """Reads one line left to right. `field` names what is being read, for errors (`args[1]`, `type of y`)."""

    def __init__(self, line: str, number: int, where: str = ""):
        self.line, self.lineno, self.where = line, number, where
        self.pos = 0
        self.field = ""

    def fail(self, what: str, pos: int | None = None) -> SchemaError:
        pos = self.pos if pos is None else pos
        place = f"{self.where}line {self.lineno}" + (f", {self.field}" if self.field else "")
        first = max(0, min(pos - _SHOWN // 2, len(self.line) - _SHOWN))
        shown = self.line[first:first + _SHOWN]
        return SchemaError(place, f"{what} (column {pos + 1})\n    {shown}\n    {' ' * (pos - first)}^")

    # ------------------------------------------------------------------------------------------ characters

    def peek(self, n: int = 1) -> str:
        return self.line[self.pos:self.pos + n]

    def spaces(self) -> None:
        while self.pos < len(self.line) and self.line[self.pos] in " \t":
            self.pos += 1

    def take(self, literal: str) -> bool:
        if self.line.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str, what: str | None = None) -> None:
        if not self.take(literal):
            found = self.peek(12) or "the end of the line"
            raise self.fail(f"expected {what or repr(literal)}, found {found!r}")

    def match(self, pattern: re.Pattern) -> str | None:
        m = pattern.match(self.line, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group()

    def take_word(self, word: str) -> bool:
        """`word` as a whole word (not the start of a longer name)."""
        end = self.pos + len(word)
        if self.line.startswith(word, self.pos) and not _NAME_CHAR.match(self.line, end):
            self.pos = end
            return True
        return False

    def end(self) -> None:
        self.spaces()
        if self.pos < len(self.line):
            raise self.fail(f"unexpected {self.peek(12)!r}")

    # ------------------------------------------------------------------------------------------ tokens

    def ident(self, what: str = "a name") -> str:
        text = self.match(IDENT)
        if text is None:
            raise self.fail(f"expected {what}, found {self.peek(12) or 'the end of the line'!r}")
        return text

    def name(self) -> str:
        """A value, graph or constant name: an identifier, or `%"any text"`."""
        return self.string() if self.take("%") else self.ident()

    def string(self) -> str:
        start = self.pos
        token = self.match(_STRING)
        if token is None:
            raise self.fail("expected a string in double quotes")
        try:
            return json.loads(token)
        except ValueError as e:
            raise self.fail(f"not a valid string: {e}", start) from None

    def number(self) -> int | float | None:
        """An int or a float, or None when no number starts here. Floats have a dot, an exponent, or are words."""
        start = self.pos
        token = self.match(_NUMBER)
        if token is None:
            return None
        if _NAME_CHAR.match(self.line, self.pos):
            raise self.fail(f"unexpected {self.peek(12)!r} after the number {token!r}")
        if INT_TEXT.fullmatch(token):
            return self._int(token, start)
        if len(token) > MAX_NUMBER_CHARS:
            raise self.fail(f"a number of {len(token)} characters (the limit is {MAX_NUMBER_CHARS})", start)
        return float(token)

    def _int(self, token: str, start: int) -> int:
        if len(token.lstrip("-")) > MAX_INT_DIGITS:
            raise self.fail(f"an integer of {len(token)} digits (the limit is {MAX_INT_DIGITS})", start)
        return int(token)

    def check_range(self, n: int, low: int, high: int, what: str, start: int) -> int:
        if not low <= n <= high:
            raise self.fail(f"expected {what} in [{low}, {high}], got {n}", start)
        return n

    def int_in(self, low: int, high: int, what: str) -> int:
        start = self.pos
        n = self.number()
        if not isinstance(n, int):
            raise self.fail(f"expected {what}", start)
        return self.check_range(n, low, high, what, start)

    # ------------------------------------------------------------------------------------------ sizes

    def chunk(self, stops: str) -> str:
        """The text up to a stop character outside parentheses (an expression may hold `Max(a, b)`)."""
        start, depth = self.pos, 0
        while self.pos < len(self.line):
            c = self.line[self.pos]
            if c == ")" and depth == 0 and ")" not in stops:
                raise self.fail("unbalanced ')'")
            if depth == 0 and c in stops:
                break
            depth += (c == "(") - (c == ")")
            self.pos += 1
        return self.line[start:self.pos]

    def expression(self, text: str, start: int) -> str:
        """`text`, checked against ember's expression grammar (never evaluated as Python), its values integers."""
        try:
            parse_integer(text)
        except ExprError as e:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise self.fail(f"expression {shown!r}: {e.what}", start + (e.pos or 0)) from None
        return text

    def sym(self) -> str:
        """The expression of `sym(...)`, whose `sym(` was just read."""
        start = self.pos
        text = self.chunk(")")
        self.expect(")", "')' closing sym(")
        return self.expression(text, start)

    def dim(self, stops: str, high: int) -> int | str:
        """A size, stride or offset: an int in [0, high], `sym(expr)`, or (in a list) a bare expression."""
        start = self.pos
        if self.take("sym("):
            return self.sym()
        raw = self.chunk(stops)
        text = raw.strip()
        start += len(raw) - len(raw.lstrip())
        if not text:
            raise self.fail("expected a size", start)
        if INT_TEXT.fullmatch(text):
            return self.check_range(self._int(text, start), 0, high, "a size", start)
        return self.expression(text, start)

    def dims(self, close: str, high: int) -> tuple[int | str, ...]:
        """Sizes up to `close` (just read the opening bracket)."""
        out: list[int | str] = []
        if self.take(close):
            return ()
        while True:
            out.append(self.dim("," + close, high))
            self.spaces()
            if self.take(close):
                return tuple(out)
            self.expect(",", f"',' or {close!r}")
            self.spaces()
