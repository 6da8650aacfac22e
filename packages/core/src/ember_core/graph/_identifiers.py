"""Names in generated source: any Unicode name a module, class, function or value may have, spelled as an ASCII
identifier that every language ember prints (Python, C++, Triton) reads as itself.

Python normalizes identifiers in source (NFKC): `def graph_Ｂlock` defines `graph_Block`, and `ｘ` and `x` are one
variable, so a name that is only `str.isidentifier()` may define something else than its text, or two values may
become one. Letters outside ASCII are spelled by code point (`Ｂ` becomes `uff22`); ASCII characters that are not
letters, digits or `_` become `_`.
"""

from __future__ import annotations

import keyword


def source_identifier(name: str) -> str:
    """`name` as ASCII letters, digits and `_`, non-empty; it may still start with a digit (callers prefix it)."""
    out = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" if c.isascii() else f"u{ord(c):x}"
                  for c in name)
    return out or "_"


def is_source_identifier(name: str) -> bool:
    """Whether `name` can appear in generated Python as itself: ASCII, an identifier, not a keyword."""
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)
