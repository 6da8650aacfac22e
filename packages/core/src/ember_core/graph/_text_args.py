"""The pieces of a node's line in graph text after its op: the arguments (numbers, strings, references, devices,
dtypes, layouts, nested lists), the notes after `#`, and a constant's inline data.

Each piece is read from a `Cursor` and checked as it is read; nothing is evaluated. Words are looked up in fixed
tables (`None`, dtypes like `f32`, layouts, memory formats), never resolved as Python names.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from ._dtypes import DTYPE_NAMES, LAYOUTS, MEMORY_FORMATS, short_dtype, tensor_of_numbers, to_dtype
from ._json_args import INT64, MAX_ARG_DEPTH
from ._printer import IDENT, RESERVED
from ._schema import REGIONS, Ref, Sym
from ._text_cursor import Cursor

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_DEVICE = re.compile(r"[A-Za-z0-9_:]+")
_NOTE_WORD = re.compile(r'[^\s="\\]+')
_NOTE_VALUE = re.compile(r'[^\s"\\]+')
ARG_DTYPES = {short_dtype(n): to_dtype(n) for n in DTYPE_NAMES}  # `f32` → torch.float32
# Layouts and memory formats by their printed text (`torch.strided`): fixed tables, so no attribute of torch is
# ever looked up by a name from the text.
_TORCH_WORDS = {str(obj): obj for obj in (*LAYOUTS.values(), *MEMORY_FORMATS.values())}
_LITERALS = {"None": None, "True": True, "False": False}


def device_text(c: Cursor) -> str:
    text = c.string() if c.peek() == '"' else c.match(_DEVICE)
    if not text:
        raise c.fail("expected a device after '@'")
    return text


def arguments(c: Cursor) -> tuple[list, dict]:
    args: list = []
    kwargs: dict[str, Any] = {}
    while not c.take(")"):
        if args or kwargs:
            c.expect(", ", "', ' or ')'")
        c.field = f"args[{len(args)}]"
        start, key = c.pos, _keyword(c)
        if key is None and kwargs:
            raise c.fail("a positional argument after keyword arguments")
        if key is not None:
            c.field = f"kwargs.{key}"
            if key in kwargs:
                raise c.fail(f"keyword {key!r} given twice", start)
            kwargs[key] = argument(c, 0)
        else:
            args.append(argument(c, 0))
    return args, kwargs


def argument(c: Cursor, depth: int) -> Any:
    start, first = c.pos, c.peek()
    if first == "[":
        return argument_list(c, depth)
    if first == '"':
        return c.string()
    if c.take("%"):
        return Ref(c.string())
    if c.take("@"):
        return _device(c, device_text(c), start)
    number = c.number()
    if number is not None:
        if isinstance(number, int):
            c.check_range(number, *INT64, "a 64-bit integer", start)
        return number
    word = c.match(WORD)
    if word is None:
        raise c.fail(f"expected an argument, found {c.peek(12) or 'the end of the line'!r}")
    return _argument_word(c, word, start)


def argument_list(c: Cursor, depth: int) -> tuple:
    if depth >= MAX_ARG_DEPTH:
        raise c.fail(f"lists nested deeper than {MAX_ARG_DEPTH}")
    c.expect("[")
    items: list = []
    while not c.take("]"):
        if items:
            c.expect(", ", "', ' or ']'")
        items.append(argument(c, depth + 1))
    return tuple(items)


def _argument_word(c: Cursor, word: str, start: int) -> Any:
    if word in _LITERALS:
        return _LITERALS[word]
    if word == "sym" and c.take("("):
        return Sym(c.sym())
    if word in _TORCH_WORDS:
        return _TORCH_WORDS[word]
    if word in ARG_DTYPES:
        return ARG_DTYPES[word]
    if IDENT.fullmatch(word) and word not in RESERVED:
        return Ref(word)
    raise c.fail(f"unknown word {word!r}", start)


def notes(c: Cursor, region: str | None) -> dict[str, str]:
    """`# source  region  key=value ...` after a node."""
    c.field = "meta"
    meta: dict[str, str] = {}
    c.spaces()
    if c.pos < len(c.line):
        c.expect("#", "'#' before the node's notes")
        c.spaces()
        while c.pos < len(c.line):
            start = c.pos
            key, text = _note(c)
            if key in meta:
                raise c.fail(f"two {key} entries", start)
            meta[key] = text
            c.spaces()
    if region is not None:
        meta.setdefault("region", region)
    return meta


def _keyword(c: Cursor) -> str | None:
    """The `key=` before a keyword argument, read; None (nothing read) before a positional one."""
    start = c.pos
    if c.peek() == '"':
        key = c.string()
        if c.take("="):
            return key
        c.pos = start
        return None
    m = c.match(_KEYWORD)
    return m[:-1] if m is not None else None


def _device(c: Cursor, text: str, start: int) -> torch.device:
    try:
        return torch.device(text)
    except (RuntimeError, ValueError) as e:
        raise c.fail(f"unknown device {text!r}: {e}"[:200], start) from None


def _note(c: Cursor) -> tuple[str, str]:
    """One note: `key=value`, a region word, or the source location; either side may be a quoted string."""
    quoted = c.peek() == '"'
    text = c.string() if quoted else c.match(_NOTE_WORD)
    if text is None:
        raise c.fail(f"unexpected {c.peek(12)!r} in the notes")
    if c.take("="):
        value = c.string() if c.peek() == '"' else c.match(_NOTE_VALUE)
        if value is None:
            raise c.fail(f"expected a value after {text}=")
        return text, value
    return ("region", text) if text in REGIONS and not quoted else ("source", text)


def type_text(dtype: torch.dtype, shape: tuple) -> str:
    short = next((k for k, v in ARG_DTYPES.items() if v == dtype), str(dtype))
    return f"{short}[{', '.join(map(str, shape))}]"


def constant_data(c: Cursor, items: tuple, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    numel = math.prod(shape)
    if len(items) != numel:
        raise c.fail(f"{len(items)} numbers for sizes {list(shape)} ({numel} elements)")
    try:
        return tensor_of_numbers(items, dtype).reshape(shape)
    except ValueError as e:
        raise c.fail(f"not a list of {type_text(dtype, ())[:-2]} numbers: {e}"[:300]) from None
