"""The metaclass of the loop IR's `Op`: enum-like members that stay open to additions."""

from __future__ import annotations

from typing import Any


class OpenEnum(type):
    """Makes a class read like an enum (`Op.ADD`, `Op("add")`, `for op in Op`, members written as `ADD = "add"` in
    the class body) while staying open: the class's `_add(name, value)` makes and interns a member, and a later
    caller may add more (`define_op`, `_op_semantics.py`, adds a loop-IR op with its semantics at run time)."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict):
        members = {k: v for k, v in namespace.items() if k.isupper() and isinstance(v, str)}
        cls = super().__new__(mcs, name, bases, {k: v for k, v in namespace.items() if k not in members})
        cls._members = {}
        for member, value in members.items():
            cls._add(member, value)
        return cls

    def __iter__(cls):
        return iter(tuple(cls._members.values()))

    def __len__(cls) -> int:
        return len(cls._members)

    def named(cls, value: str) -> Any:
        """The member whose text name is `value`, or None."""
        return cls._members.get(value)

    def __call__(cls, value: str) -> Any:
        try:
            return cls._members[value]
        except KeyError:
            raise ValueError(f"{value!r} is not a loop-IR op") from None
