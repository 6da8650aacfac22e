"""Shared pieces of ember's fuzz tests: Hypothesis settings sized by the environment, payload strings that would
run code if anything evaluated them, and the canary those payloads set.

Every fuzz test counts its cases with a `FuzzTally` (accepted, refused, and the failures: code run, crash, hang,
wrongly accepted) and judges each accepted file with the oracle `accepted_graph_problem` (and
`constant_fit_problem` for the numbers of constants), the rules the unit tests hold the loaders to.

`EMBER_FUZZ_EXAMPLES` sets the cases per test (CI's default is a few hundred; `nox -s fuzz` runs thousands);
`EMBER_FUZZ_SEED` unset keeps the cases the same run to run, any value draws fresh ones. Hypothesis is imported
only when `fuzz_settings` is called, so plugins that never fuzz need not install it.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

CANARY = "EMBER_CANARY"
_SET_CANARY = f"__import__('builtins').setattr(__import__('builtins'), '{CANARY}', 1)"

# Text that runs code under eval/exec/sympify, in an f-string, or through str.format; then text that breaks limits.
PAYLOADS: tuple[str, ...] = (
    _SET_CANARY,
    "{" + _SET_CANARY + "}",
    "{0.__class__.__init__.__globals__}",
    "exec(" + repr(_SET_CANARY) + ")",
    "torch.__class__.__init__",
    "10**10**10",
    "(" * 2000 + "s0" + ")" * 2000,
    "9" * 5000,
)


def fuzz_examples(default: int = 300, variable: str = "EMBER_FUZZ_EXAMPLES") -> int:
    return int(os.environ.get(variable, default))


def fuzz_settings(default_examples: int = 300, variable: str = "EMBER_FUZZ_EXAMPLES", **overrides: Any) -> Any:
    """Hypothesis settings for a fuzz test: no per-case deadline (tests bound time themselves), no health checks
    that flag slow or large inputs (those are the point), reproducible unless `EMBER_FUZZ_SEED` is set. The
    environment `variable` sets the number of cases (`EMBER_FUZZ_CLI_EXAMPLES` for the slow ones)."""
    from hypothesis import HealthCheck, settings

    return settings(max_examples=fuzz_examples(default_examples, variable), deadline=None,
                    derandomize=os.environ.get("EMBER_FUZZ_SEED") is None,
                    suppress_health_check=list(HealthCheck), **overrides)


def assert_no_code_ran() -> None:
    """Fails if any payload was evaluated: they all set the canary attribute on `builtins`."""
    assert not hasattr(builtins, CANARY), "input text was run as code (the fuzz canary is set)"


def marker_payloads(marker: str | os.PathLike) -> tuple[str, ...]:
    """Payloads that create the file `marker` if anything runs them: as Python (eval, exec, sympify, format
    strings) or as a shell command line. For fuzzing a subprocess, where the canary of `builtins` cannot be seen."""
    touch = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    return (touch, "{" + touch + "}", f"exec({touch!r})", f"$(touch {marker})", f"`touch {marker}`",
            f"; touch {marker} #")


# ---------------------------------------------------------------------------------------------- counting outcomes

class FuzzHang(Exception):
    """A case ran past its time bound (raised from a timer signal, where one can be set)."""


class FuzzFailure(Exception):
    """Raised by a case that judged its own outcome (a subprocess's exit, say): `kind` is one of `FAILURES`."""

    def __init__(self, kind: str, what: str):
        super().__init__(what)
        self.kind = kind


@dataclass
class FuzzTally:
    """What the cases of a fuzz test ended in: `refused` (a clean `EmberError`, or the error types given) and
    `accepted`, or one of the failures: `code run` (the canary or a marker file appeared), `crash` (any other
    exception), `hang` (past the time bound) and `wrongly accepted` (the oracle names what a loader should have
    refused). A failure also fails the case at once, so Hypothesis shrinks it; `summary()` is the line a fuzz
    module prints at its end."""

    name: str
    time_bound_s: float = 5.0  # a case past it is a hang
    counts: Counter = field(default_factory=Counter)

    def run(self, load: Callable[[], Any], oracle: Callable[[Any], str | None] | None = None,
            refusals: tuple[type[BaseException], ...] = ()) -> Any:
        """Run one case; return what `load` returned (None when it was refused)."""
        from .._errors import EmberError

        start = time.perf_counter()
        try:
            with _time_bound(self.time_bound_s):
                result = load()
            problem = oracle(result) if oracle is not None else None
        except (EmberError, *refusals):
            result, problem, outcome = None, None, "refused"
        except FuzzHang:
            self._fail("hang", f"ran longer than {self.time_bound_s} s")
        except FuzzFailure as e:
            self._fail(e.kind, str(e))
        except Exception as e:
            self._fail("crash", f"{type(e).__name__}: {e}"[:2000], e)
        else:
            outcome = "accepted"
        if time.perf_counter() - start > self.time_bound_s:
            self._fail("hang", f"took {time.perf_counter() - start:.1f} s, more than {self.time_bound_s} s")
        if hasattr(builtins, CANARY):
            self._fail("code run", "input text was run as code (the fuzz canary is set)")
        if problem is not None:
            self._fail("wrongly accepted", problem)
        self.counts[outcome] += 1
        return result

    def _fail(self, kind: str, what: str, cause: BaseException | None = None) -> None:
        self.counts[kind] += 1
        raise AssertionError(f"{self.name}: {kind}: {what}") from cause

    def failures(self) -> int:
        return sum(self.counts[k] for k in FAILURES)

    def summary(self) -> str:
        parts = [f"{k} {self.counts[k]}" for k in ("accepted", "refused", *FAILURES)]
        return f"fuzz {self.name}: {sum(self.counts.values())} cases: " + ", ".join(parts)

    def report(self, config: Any) -> None:
        """Write the summary on pytest's terminal (seen with or without `-s`), then fail if any case failed."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None:
            with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
                reporter.ensure_newline()
                reporter.write_line(self.summary())
        assert self.failures() == 0, self.summary()


FAILURES = ("code run", "crash", "hang", "wrongly accepted")


@contextlib.contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    """Raise `FuzzHang` in the case when it runs past `seconds` (a timer signal: main thread on Unix only; where
    none can be set, the case's time is checked after it returns)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise FuzzHang()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds * 2)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------- the oracle

INT64_MAX = (1 << 63) - 1


def accepted_graph_problem(graph: Any) -> str | None:
    """What a loader should have refused in a graph it accepted, worked out independently of the loaders (sympy
    for sizes, torch's dispatcher table for ops): a size, stride or offset that is not an integer expression in
    [0, 2**63) at the symbols' hints, an element count or last element past int64, an op torch does not have, or
    an argument of the wrong kind (a float where the schema wants an int, a list where it wants a Tensor). None
    when there is nothing; a subgraph is checked too."""
    hints = {s.name: s.hint for s in graph.symbols}
    for name, value in graph.values.items():
        problem = _layout_oracle(value, hints)
        if problem is not None:
            return f"values.{name}: {problem}"
    for i, node in enumerate(graph.nodes):
        problem = accepted_call_problem(node.op, node.args, node.kwargs)
        if problem is not None:
            return f"nodes[{i}] ({node.op}): {problem}"
    for name, c in graph.constants.items():
        problem = _layout_oracle_numbers(list(c.tensor.shape), _row_major(list(c.tensor.shape)), 0)
        if problem is not None:
            return f"constants.{name}: {problem}"
    return next((f"subgraph {k}: {p}" for k, sub in graph.subgraphs.items()
                 if (p := accepted_graph_problem(sub)) is not None), None)


def constant_fit_problem(items: list[Any], tensor: Any) -> str | None:
    """Why the tensor a loader made does not hold these numbers as its dtype must (an int dtype holds them
    exactly, a float dtype keeps finite numbers finite, bool holds bools), or None."""
    import torch

    values = tensor.reshape(-1).tolist()
    if len(values) != len(items):
        return f"{len(items)} numbers became {len(values)} elements"
    for k, (x, got) in enumerate(zip(items, values)):
        if tensor.dtype == torch.bool:
            ok = isinstance(x, bool) and x == got
        elif tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            got = complex(got).real
            ok = not isinstance(x, bool) and isinstance(x, (int, float)) and \
                (math.isnan(got) if math.isnan(x) else math.isinf(got) == math.isinf(x))
        else:
            ok = type(x) is int and x == got
        if not ok:
            return f"item {k}: {x!r} became {got!r} in {tensor.dtype}"
    return None


def _layout_oracle(value: Any, hints: dict[str, int]) -> str | None:
    numbers = []
    for d in (*value.shape, *value.stride, value.storage_offset):
        n, problem = _dim_oracle(d, hints)
        if problem is not None:
            return problem
        numbers.append(n)
    rank = len(value.shape)
    if len(value.stride) != rank:
        return None  # verify's rule; it names the mismatch
    return _layout_oracle_numbers(numbers[:rank], numbers[rank:2 * rank], numbers[-1])


def _dim_oracle(d: Any, hints: dict[str, int]) -> tuple[int | None, str | None]:
    import sympy

    from ..graph._expr import parse_expr

    if isinstance(d, bool) or not isinstance(d, (int, str)):
        return None, f"{d!r} is not an int or an expression"
    if isinstance(d, int):
        return d, (None if 0 <= d <= INT64_MAX else f"{d} lies outside int64's sizes")
    expr = parse_expr(d)
    sizes = {s: sympy.Symbol(s.name, integer=True, nonnegative=True) for s in expr.free_symbols}
    if expr.xreplace(sizes).is_integer is not True:
        return None, f"{d!r} is not an integer expression"
    if not {s.name for s in expr.free_symbols} <= hints.keys():
        return None, f"{d!r} names a symbol the graph does not declare"
    n = expr.xreplace({s: sympy.Integer(hints[s.name]) for s in expr.free_symbols})
    if not (n.is_Integer and 0 <= int(n) <= INT64_MAX):
        return None, f"{d!r} is {n} at the hints, not an integer in [0, 2**63)"
    return int(n), None


def _layout_oracle_numbers(sizes: list[int | None], strides: list[int | None], offset: int | None) -> str | None:
    if None in sizes or None in strides or offset is None:
        return None
    numel = math.prod(sizes)
    if math.prod(max(n, 1) for n in sizes) > INT64_MAX:
        return f"sizes {sizes} multiply past int64"
    if any(s > INT64_MAX for s in strides):
        return "a stride past int64"
    if numel and offset + sum((n - 1) * s for n, s in zip(sizes, strides)) > INT64_MAX:
        return "the last element lies past int64"
    return None


def _row_major(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return strides[::-1]


def accepted_call_problem(op: str, args: tuple, kwargs: dict) -> str | None:
    """The oracle's part for one call (a graph's node, a plan's extern): an op torch's dispatcher does not have,
    a float where the schema wants an int, a list (or a string, a dtype ...) where it wants a Tensor."""
    import torch

    from ..graph._ops import SYM_OPS
    from ..graph._schema import Ref

    if op in SYM_OPS:
        return None
    parts = op.split(".")
    if len(parts) != 3 or parts[0].startswith("__") or parts[2].startswith("__"):
        return f"op name {op!r} is not namespace.op.overload"
    qualified, overload = f"{parts[0]}::{parts[1]}", "" if parts[2] == "default" else parts[2]
    try:
        torch._C._dispatch_find_schema_or_throw(qualified, overload)
    except RuntimeError:
        return f"torch has no op {op!r}"
    schema = torch._C._get_schema(qualified, overload)
    params = [a for a in schema.arguments if not a.kwarg_only]
    named = {a.name: a for a in schema.arguments}
    for param, value in [*zip(params, args), *((named[k], v) for k, v in kwargs.items() if k in named)]:
        wanted = str(param.real_type).removeprefix("Optional[").removesuffix("]")
        flat = value if isinstance(value, tuple) else (value,)
        if wanted in ("int", "List[int]", "SymInt", "List[SymInt]") and any(isinstance(v, float) for v in flat):
            return f"argument {param.name!r} ({param.real_type}) holds a float"
        if wanted == "Tensor" and not (isinstance(value, (Ref, int, float, bool)) or value is None):
            return f"argument {param.name!r} (Tensor) is {type(value).__name__} {value!r}"[:200]
    return None
