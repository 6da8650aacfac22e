"""Options: a table of known keys with types, defaults and docs. Plugins add their own keys by registering."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
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


CORE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("frontend", str, "dynamo", "capture frontend: 'dynamo' (torch._dynamo) or 'trace' (ember's own JIT)",
               stage="frontend"),
    OptionSpec("passes", (list, tuple), None,
               "graph pass ids to run, in order (default: every pass registered as default)", stage="pass"),
    OptionSpec("autograd", str, None, "autograd implementation for training (default: the highest priority installed; "
               "'eager': run the forward graph under eager autograd)", stage="autograd", also=("eager",)),
    OptionSpec("partition", str, None, "partitioner of joint graphs (default: the highest priority installed)",
               stage="partition"),
    OptionSpec("codegen.cpu", str, None, "codegen for CPU graphs (default: the highest priority for 'cpu')",
               stage="codegen", device="cpu"),
    OptionSpec("codegen.cuda", str, None, "codegen for CUDA graphs (default: the highest priority for 'cuda')",
               stage="codegen", device="cuda"),
    OptionSpec("cache", bool, True,
               "reuse a compiled graph when the same graph is compiled again with the same options, and a "
               "partition or kernel plan an earlier process stored in the disk caches (EMBER_CACHE_DIR)"),
    OptionSpec("dump", str, None, "folder to write every stage's graph and source to (as EMBER_DUMP)"),
    OptionSpec("freezing", bool, None,
               "inference graphs read parameters and buffers as constants: weight-only work folded once, batch norm "
               "folded into the convolution or linear before it, CPU weights pre-packed for oneDNN with the "
               "activation fused; a parameter changed in place or replaced is seen at the next call and refrozen. "
               "Default (None): on under torch.no_grad() / inference mode when no parameter or buffer the graph "
               "reads requires grad; True: on for every graph that needs no grad; False: off"),
    OptionSpec("compiled_autograd", bool, False,
               "capture every backward the compiled function runs whole, hooks included, and compile it with ember "
               "(ember.compiled_autograd)"),
)


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
    return {key: options.get(key, spec.default) for key, spec in specs.items()} | options
