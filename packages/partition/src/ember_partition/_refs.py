"""The values a node reads: every `Ref` in its arguments, looking inside lists and kwargs, in argument order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ember_core import Node, Ref


def iter_refs(arg: Any) -> Iterator[str]:
    if isinstance(arg, Ref):
        yield arg.name
    elif isinstance(arg, (list, tuple)):
        for a in arg:
            yield from iter_refs(a)
    elif isinstance(arg, dict):
        for a in arg.values():
            yield from iter_refs(a)


def node_reads(node: Node) -> tuple[str, ...]:
    """Names read by `node`, each once, in argument order."""
    return tuple(dict.fromkeys((*iter_refs(node.args), *iter_refs(node.kwargs))))
