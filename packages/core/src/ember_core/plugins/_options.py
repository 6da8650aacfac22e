"""Options: a table of known keys with types, defaults and docs. Each is declared by the package that reads it, in its
`ember_register` (`registry.add_option`): ember-core reads none; the runtime declares the pipeline's (`frontend`,
`codegen.cpu`, `cache`...), capture its frontends', a codegen its own."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import OptionError


@dataclass(frozen=True, slots=True)
class OptionSpec:
    key: str
    type: type | tuple[type, ...]
    default: Any
    doc: str
    plugin: str = "ember-core"
    stage: str | None = None  # the value names an implementation of this stage (`passes`: a list of them)
    device: str | None = None  # ... one that serves this device
    also: tuple[str, ...] = ()  # names accepted beside the installed ones (autograd's 'eager')
    choices: tuple[Any, ...] = ()  # the values it takes, where they are a fixed few (none: any of its type)
    check: Callable[[Any], str | None] | None = None  # what is wrong with a value of its type (its range), or None


def check_options(options: Mapping[str, Any] | None, specs: Mapping[str, OptionSpec],
                  source: str = "") -> dict[str, Any]:
    """Return the options with defaults filled in; `OptionError` naming the bad key and listing the valid ones.
    `source` names where the options came from when it is not the call (EMBER_OPTIONS)."""
    options = dict(options or {})
    where = f"{source}: " if source else ""
    for key, value in options.items():
        spec = specs.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, specs, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OptionError(f"{where}unknown option {key!r}{hint}; valid options: {', '.join(sorted(specs))}")
        if value is not None and not isinstance(value, spec.type) or isinstance(value, bool) and spec.type is int:
            want = spec.type.__name__ if isinstance(spec.type, type) else " or ".join(t.__name__ for t in spec.type)
            raise OptionError(f"{where}option {key!r} must be {want}, got {type(value).__name__} {value!r}: {spec.doc}")
        if spec.choices and value is not None and value not in spec.choices:
            raise OptionError(f"{where}option {key!r} is one of {', '.join(map(repr, spec.choices))}, not {value!r}: "
                              f"{spec.doc}")
        problem = spec.check(value) if spec.check is not None and value is not None else None
        if problem:
            raise OptionError(f"{where}option {key!r} {problem}, not {value!r}: {spec.doc}")
    return {key: options.get(key, spec.default) for key, spec in specs.items()} | options
