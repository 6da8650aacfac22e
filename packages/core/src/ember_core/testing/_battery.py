"""The graph battery: small functions traced with make_fx into ATen graphs, each with inputs and an eager reference.

Every stage's tests run the battery: the interpreter against eager PyTorch, a codegen against the interpreter, the
JSON and fx forms by round trip. A case is traced on first use and cached; `battery()` traces them all (a few
seconds). Add a case by appending a `CaseSpec` to `_SPECS`: a function returning a tuple, and a function building its
inputs at a given size `n` (symbolic cases are traced at `n = 6` and checked again at `n = 11`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from ..graph._fx_bridge import from_fx
from ..graph._schema import Graph, Input, Output

TRACE_SIZE = 6  # the size `n` a case is traced at; distinct from every static size in the battery
OTHER_SIZE = 11  # symbolic cases are run again at this size

F = torch.nn.functional


@dataclass(frozen=True)
class BatteryCase:
    """One traced graph: `reference(*inputs)` gives, in eager PyTorch, what the graph's outputs should be."""

    name: str
    graph: Graph
    gm: fx.GraphModule  # the make_fx module the graph was read from
    make_inputs: Callable[[int, int], list]  # (size n, seed) -> fresh inputs
    reference: Callable[..., Sequence[Any]]
    symbolic: bool

    @property
    def inputs(self) -> list:
        """Fresh example inputs at the traced size (a new list each time: references may mutate their inputs)."""
        return self.make_inputs(TRACE_SIZE, 0)

    def input_sets(self) -> list[list]:
        """Inputs to check a compiled graph with: the traced size, a second seed, and another size if symbolic."""
        sets = [self.make_inputs(TRACE_SIZE, 0), self.make_inputs(TRACE_SIZE, 1)]
        return sets + ([self.make_inputs(OTHER_SIZE, 2)] if self.symbolic else [])


@dataclass(frozen=True)
class CaseSpec:
    name: str
    fn: Callable[..., tuple]
    make_inputs: Callable[[int, torch.Generator], list]
    symbolic: bool = False
    stamp: Callable[[fx.GraphModule], None] | None = None  # sets ember_input / ember_outputs meta
    reference: Callable[..., tuple] | None = None  # defaults to fn


# ---------------------------------------------------------------------------------------------- inputs


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


def _randint(g: torch.Generator, high: int, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=g, dtype=dtype)


def _two(n: int, g: torch.Generator) -> list:
    return [_randn(g, n, 8), _randn(g, n, 8)]


def _one(n: int, g: torch.Generator) -> list:
    return [_randn(g, n, 8)]


# ---------------------------------------------------------------------------------------------- functions


def pointwise_chain(x, y):
    a = (x * y + 1).relu().exp() - y.sin()
    b = torch.sigmoid(a).tanh() / (y.abs() + 1)
    return (b, torch.rsqrt(x.abs() + 0.5) * -a.pow(2))


def broadcast(x, y, z):
    return (x + y, (x * z).sub(y), torch.maximum(x, z))


def reductions(x):
    return (x.sum(1), x.amax(0, keepdim=True), x.argmax(1), x.mean(1, keepdim=True), x.var(0, keepdim=True), x.sum())


def views(x):
    return (
        x.view(8, 6), x.permute(1, 0), x.t().contiguous(), x.unsqueeze(0).expand(3, 6, 8), x[1:5:2],
        x.select(1, 3), x.as_strided((3, 3), (2, 1), 1), x.unsqueeze(1) * 2, x.transpose(0, 1)[::2] + 1,
    )


def views_symbolic(x):
    n = x.shape[0]
    return (
        x.view(n * 8), x.permute(1, 0) * 2, x.unsqueeze(0).expand(3, n, 8) + 1, x[1:], x.select(1, 3),
        x.transpose(0, 1)[::2],
    )


def multi_output(x, w, b):
    y = F.layer_norm(x, (8,), w, b)
    values, indices = x.max(dim=1)
    parts = x.split(3, dim=1)
    return (y, values, indices, parts[0] + parts[2][:, :1], parts[1])


def softmax(x):
    return (x.softmax(-1), x.log_softmax(0))


def matmul(x, w, b, y):
    return (x @ w, F.linear(x, w.t(), b), torch.bmm(y, y.transpose(1, 2)), torch.matmul(y, w))


def matmul_inputs(n: int, g: torch.Generator) -> list:
    return [_randn(g, n, 8), _randn(g, 8, 5), _randn(g, 5), _randn(g, 2, n, 8)]


def concat(x, y):
    return (torch.cat([x, y], 0), torch.cat([x, y.sin()], 1))


def indexing(w, i, x, j):
    return (F.embedding(i, w), torch.index_select(x, 0, j), torch.gather(x, 1, (j.view(-1, 1) % 3).expand(-1, 3)))


def indexing_inputs(n: int, g: torch.Generator) -> list:
    return [_randn(g, 10, 4), _randint(g, 10, n), _randn(g, n, 3), _randint(g, n, n)]


def where_clamp_cast(x, y):
    casts = (x.to(torch.float16), (x * 100).to(torch.int32))
    return (torch.where(x > 0, x, y), x.clamp(-0.5, 0.5), x.clamp(min=0.1), *casts)


def dtypes(a, b, c, d, e, f):
    return (a * 2 + b.to(torch.int64), c & (a > 0), d * 2 + 1, e.float() + d.float(), f.sum(), (b // 3).to(torch.int32))


def dtypes_inputs(n: int, g: torch.Generator) -> list:
    return [
        _randint(g, 100, n), _randint(g, 100, n, dtype=torch.int32), _randint(g, 2, n).bool(),
        _randn(g, n, dtype=torch.float16), _randn(g, n, dtype=torch.bfloat16), _randn(g, n, dtype=torch.float64),
    ]


SMALL_CONSTANT = torch.linspace(-1, 1, 8)
LARGE_CONSTANT = torch.arange(128, dtype=torch.float32).reshape(16, 8) / 128  # above the inline limit of JSON


def constants(x):
    return (x.sin() + SMALL_CONSTANT, x @ LARGE_CONSTANT.t())


def symbolic_sizes(x):
    n, m = x.shape
    return (x.reshape(n * 2, -1) * 2, x.new_zeros(n) + x[:, 0], torch.ones(m, n) + x.t())


def input_mutation(x, y):
    new = x + y
    return (new, new * 2)


def input_mutation_eager(x, y):
    x.add_(y)
    return (x, x * 2)


def stamp_input_mutation(gm: fx.GraphModule) -> None:
    """Input 0 is mutated: the graph's first output carries its new content (the frontend's job, done by hand)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    placeholders[0].meta["ember_input"] = Input(placeholders[0].name, mutated=True)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    first, second = out.args[0]
    out.meta["ember_outputs"] = [Output(first.name, "mutation", 0), Output(second.name)]


_SPECS: tuple[CaseSpec, ...] = (
    CaseSpec("pointwise_chain", pointwise_chain, _two),
    CaseSpec("pointwise_chain_symbolic", pointwise_chain, _two, symbolic=True),
    CaseSpec("broadcast", broadcast, lambda n, g: [_randn(g, n, 1, 8), _randn(g, 3, 1), _randn(g, 3, 8)]),
    CaseSpec("reductions", reductions, lambda n, g: [_randn(g, n, 7)]),
    CaseSpec("reductions_symbolic", reductions, lambda n, g: [_randn(g, n, 7)], symbolic=True),
    CaseSpec("views", views, _one),
    CaseSpec("views_symbolic", views_symbolic, _one, symbolic=True),
    CaseSpec("multi_output", multi_output, lambda n, g: [_randn(g, n, 8), _randn(g, 8), _randn(g, 8)]),
    CaseSpec("softmax", softmax, lambda n, g: [_randn(g, n, 7)]),
    CaseSpec("softmax_symbolic", softmax, lambda n, g: [_randn(g, n, 7)], symbolic=True),
    CaseSpec("matmul", matmul, matmul_inputs),
    CaseSpec("matmul_symbolic", matmul, matmul_inputs, symbolic=True),
    CaseSpec("concat", concat, lambda n, g: [_randn(g, n, 4), _randn(g, n, 4)]),
    CaseSpec("indexing", indexing, indexing_inputs),
    CaseSpec("where_clamp_cast", where_clamp_cast, _two),
    CaseSpec("dtypes", dtypes, dtypes_inputs),
    CaseSpec("dtypes_symbolic", dtypes, dtypes_inputs, symbolic=True),
    CaseSpec("constants", constants, _one),
    CaseSpec("symbolic_sizes", symbolic_sizes, _one, symbolic=True),
    CaseSpec("input_mutation", input_mutation, _two, stamp=stamp_input_mutation, reference=input_mutation_eager),
)
_BY_NAME = {s.name: s for s in _SPECS}


# ---------------------------------------------------------------------------------------------- tracing


def battery_names() -> tuple[str, ...]:
    """Names of every case, without tracing (for `pytest.mark.parametrize`)."""
    return tuple(_BY_NAME)


def battery_spec(name: str) -> CaseSpec:
    """One case before tracing: its function (`fn`, functional; `reference`, as eager code would write it), input
    builder and whether it is symbolic. `KeyError` names the known cases."""
    spec = _BY_NAME.get(name)
    if spec is None:
        raise KeyError(f"no battery case {name!r}; cases: {', '.join(_BY_NAME)}")
    return spec


@functools.cache
def battery_case(name: str) -> BatteryCase:
    """Trace one case (cached). `KeyError` names the known cases."""
    return trace_case(battery_spec(name))


def trace_case(spec: CaseSpec) -> BatteryCase:
    """Trace a case of the battery's form (the kits add cases of their own)."""

    def make_inputs(n: int, seed: int) -> list:
        return spec.make_inputs(n, torch.Generator().manual_seed(seed))

    mode = "symbolic" if spec.symbolic else "fake"
    gm = make_fx(spec.fn, tracing_mode=mode, _allow_non_fake_inputs=True)(*make_inputs(TRACE_SIZE, 0))
    if spec.stamp is not None:
        spec.stamp(gm)
    graph = from_fx(gm, name=spec.name, producer="ember_core.testing.battery")
    return BatteryCase(spec.name, graph, gm, make_inputs, spec.reference or spec.fn, spec.symbolic)


def battery() -> list[BatteryCase]:
    """Every case, traced."""
    return [battery_case(name) for name in battery_names()]


def clone_inputs(inputs: Sequence[Any]) -> list:
    """Copies of tensor inputs, so a run that mutates them leaves the originals alone."""
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


__all__ = ["OTHER_SIZE", "TRACE_SIZE", "BatteryCase", "CaseSpec", "battery", "battery_case", "battery_names",
           "battery_spec", "clone_inputs", "trace_case"]
