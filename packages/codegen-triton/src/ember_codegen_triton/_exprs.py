"""Index expressions in Triton: the shared `IndexPrinter`'s walk with Triton leaves. Floor division and modulo keep
the loop IR's Python meaning: plain `//` and `%` where both operands are provably nonnegative (loop vars and sizes
are), where every rounding agrees, else the prelude's `_ember_floordiv` / `_ember_mod`."""

from __future__ import annotations

from ember_lowering.codegen import IndexPrinter


class TritonIndexPrinter(IndexPrinter):
    floordiv_fn, mod_fn = "_ember_floordiv", "_ember_mod"
    max_fn, min_fn = "tl.maximum", "tl.minimum"
    floor_fn, ceil_fn = "tl.floor", "tl.ceil"

    # A size of a fractional scale (`TruncToInt(0.7*ToFloat(s0))`) in doubles, as the shape env computed it. A bare
    # Python float takes its type from Triton's promotion rules (float32 where no float64 operand decides it, and
    # 0.7 * 10 in float32 is 6, not 7), so the constant is a float64 `full`; `tl.cast` takes a size argument that
    # Triton specialized to a constexpr as well as a tensor.
    def float_literal(self, x: float) -> str:
        return f"tl.full([], {x!r}, tl.float64)"

    def to_float(self, a: str) -> str:
        return f"tl.cast({a}, tl.float64)"

    def trunc_to_int(self, a: str) -> str:
        return f"tl.cast({a}, tl.int64)"  # toward zero, as Python's int() of a float
