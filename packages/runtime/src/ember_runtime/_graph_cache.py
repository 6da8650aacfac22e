"""The in-process cache of compiled graphs: fingerprint + codegen + options → compiled graph.

A compiled graph stays findable as long as something else holds it (a compiled function's frontend cache, an
autograd wrapper): the map holds it weakly. The `RECENT` most recently used ones are also held strongly, so a
model compiled again soon after its last use is still a hit. Nothing else is kept: compiling and dropping many
models does not grow the process.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

RECENT = 64


class GraphCache:
    def __init__(self, recent: int = RECENT):
        self.recent = recent
        self._weak: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._strong: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            hit = self._weak.get(key)
            if hit is None:
                hit = self._strong.get(key)  # a value that cannot be weakly referenced lives here only
            if hit is not None:
                self._remember(key, hit)
            return hit

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            try:
                self._weak[key] = value
            except TypeError:
                pass
            self._remember(key, value)

    def _remember(self, key: Hashable, value: Any) -> None:
        self._strong[key] = value
        self._strong.move_to_end(key)
        while len(self._strong) > self.recent:
            self._strong.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._weak.clear()
            self._strong.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(set(self._weak.keys()) | set(self._strong))
