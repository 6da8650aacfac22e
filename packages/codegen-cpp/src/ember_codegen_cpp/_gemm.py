"""Float32 matmuls on oneDNN where the CPU runs them faster there: an extern `mm` or `addmm` may be called as
oneDNN's `mkldnn._linear_pointwise(a, b.t(), bias)`, which computes the same product, instead of ATen's GEMM.

On the CPU eager and Inductor run a float32 `mm` through MKL's sgemm. On an AMD EPYC (Zen 5, AVX-512, 2 threads)
oneDNN's matmul takes 5-25% less for a linear layer's forward and its input's gradient (`x @ w.T`, `dy @ w`), and
MKL is faster for most weight gradients (`dy.T @ x`, whose left operand oneDNN reads transposed); on an Intel CPU the
two may rank otherwise. So nothing is assumed: under option `cpp.gemm="measure"` (the default) each extern of the
form, as its shapes and strides are, is timed both ways on random operands (the median of 7 interleaved rounds), once
per CPU, thread count and torch version, and the faster is kept on disk (`Tuner`: ATen's call is the default and
oneDNN must beat it by `MARGIN`).
A measurement costs a few milliseconds per distinct product at compile time; products under `MIN_MACS`
multiply-adds stay on ATen unmeasured (oneDNN's call costs 10-20 us more). `"onednn"` takes oneDNN wherever the
form allows, `"aten"` never.

The form (`linear_form`): `mm(a, b)`, or `addmm(bias, a, b)` with beta and alpha 1 and a bias of `b`'s columns;
float32 matrices of static, nonzero sizes, any strides (oneDNN reorders what it needs); and a torch with oneDNN.
The result is a new row-major tensor either way, which is what the plan's buffer for an extern's result is.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from ember_core import Ref, cpu_tag
from ember_lowering import Buffer, Extern
from ember_lowering.codegen import Tuner

log = logging.getLogger("ember.kernels")

OPTION = "cpp.gemm"
CHOICES = ("measure", "onednn", "aten")
MIN_MACS = 1 << 20
MARGIN = 0.05
ATEN, ONEDNN = (0,), (1,)
# interleaved rounds: a load that comes and goes (another graph's C++ building) weighs on both candidates alike
TUNER = Tuner("cpp_gemm", "codegen-cpp", repeats=7, margin=MARGIN, machine=("cpu",), interleave=True)
_chosen: dict[str, bool] = {}  # key -> oneDNN?, for this process (printing asks again for the profiled twin)


Layout = tuple[tuple[int, ...], tuple[int, ...]]  # sizes and strides


@dataclass(frozen=True)
class LinearForm:
    """An extern matmul as oneDNN's linear runs it, `a @ b (+ bias)`: the operands' layouts."""

    a: Layout
    b: Layout
    bias: Layout | None

    @property
    def macs(self) -> int:
        return self.a[0][0] * self.a[0][1] * self.b[0][1]

    def key(self) -> str:
        layout = (self.a, self.b, self.bias, "float32")
        machine = (f"cpu {cpu_tag()}", torch.get_num_threads(), torch.__version__)
        return hashlib.sha256(repr((layout, machine)).encode()).hexdigest()[:40]


@functools.cache
def available() -> bool:
    """Does this torch call oneDNN's linear on the CPU?"""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._linear_pointwise.default  # noqa: B018 - a lookup: registered with oneDNN only
    except (AttributeError, RuntimeError):
        return False
    return True


def linear_form(ext: Extern, buffers: Mapping[str, Buffer]) -> LinearForm | None:
    """The extern as oneDNN's linear can run it (see the module docstring), or None."""
    if ext.op == "aten.mm.default" and len(ext.args) == 2 and not ext.kwargs:
        refs, bias = ext.args, None
    elif ext.op == "aten.addmm.default" and len(ext.args) == 3 and all(
            ext.kwargs.get(k, 1) == 1 for k in ("beta", "alpha")) and set(ext.kwargs) <= {"beta", "alpha"}:
        refs, bias = ext.args[1:], ext.args[0]
    else:
        return None
    if not all(isinstance(r, Ref) for r in (*refs, *([bias] if bias is not None else []))):
        return None
    a, b = (_static_float32(buffers[r.name], 2) for r in refs)
    c = _static_float32(buffers[bias.name], 1) if bias is not None else None
    if a is None or b is None or (bias is not None and c is None):
        return None
    (m, k), (k2, n) = a[0], b[0]
    if k != k2 or (c is not None and c[0] != (n,)) or 0 in (m, k, n):
        return None
    return LinearForm(a, b, c)


def _static_float32(b: Buffer, rank: int) -> Layout | None:
    """The buffer's sizes and strides when it is a float32 tensor of `rank` dims and static sizes."""
    if b.dtype != "float32" or len(b.shape) != rank:
        return None
    dims = (*b.shape, *b.stride)
    if not all(isinstance(d, int) or getattr(d, "is_Integer", False) for d in dims):
        return None
    return tuple(int(d) for d in b.shape), tuple(int(d) for d in b.stride)


def on_onednn(form: LinearForm, options: Mapping[str, Any]) -> bool:
    """Does this matmul run on oneDNN, by option `cpp.gemm` (see the module docstring)?"""
    how = options.get(OPTION, "measure")
    if how == "aten" or not available():
        return False
    if how == "onednn":
        return True
    if form.macs < MIN_MACS:
        return False
    key = form.key()
    if key not in _chosen:
        stored = TUNER.stored(key, [ATEN, ONEDNN])
        _chosen[key] = (stored or _measure(form, key)) == ONEDNN
        log.debug("matmul %s @ %s (strides %s, %s): %s", form.a[0], form.b[0], form.a[1], form.b[1],
                  "oneDNN" if _chosen[key] else "ATen")
    return _chosen[key]


def _measure(form: LinearForm, key: str) -> tuple[int, ...]:
    a, b = _operand(form.a), _operand(form.b)
    bias = None if form.bias is None else _operand(form.bias)
    linear = torch.ops.mkldnn._linear_pointwise.default

    def launch(choice: tuple[int, ...]) -> None:
        if choice == ONEDNN:
            linear(a, b.t(), bias, "none", [], "")
        elif bias is None:
            torch.mm(a, b)
        else:
            torch.addmm(bias, a, b)

    for choice in (ATEN, ONEDNN, ATEN, ONEDNN):  # untimed: oneDNN's first two calls of a shape set it up
        launch(choice)
    (m, k), n = form.a[0], form.b[0][1]
    name = f"matmul {m}x{k}x{n}"
    return TUNER.measure(key, name, [ATEN, ONEDNN], launch, [])


def _operand(layout: Layout) -> torch.Tensor:
    """Random values laid out as an operand is (its strides, from offset 0)."""
    sizes, strides = layout
    return torch.randn(1 + sum((n - 1) * s for n, s in zip(sizes, strides))).as_strided(sizes, strides)
