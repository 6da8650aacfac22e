"""Index expressions in Triton: the shared `IndexPrinter`'s walk with Triton leaves. Floor division and modulo keep
the loop IR's Python meaning: plain `//` and `%` where both operands are provably nonnegative (loop vars and sizes
are), where every rounding agrees, else the prelude's `_ember_floordiv` / `_ember_mod`."""

from __future__ import annotations

from ember_lowering.codegen import CannotPrint, IndexPrinter


class TritonIndexPrinter(IndexPrinter):
    floordiv_fn, mod_fn = "_ember_floordiv", "_ember_mod"
    max_fn, min_fn = "tl.maximum", "tl.minimum"

    def float_literal(self, x: float) -> str:
        # Triton takes a Python float constant as float32, which rounds a size of a fractional scale differently
        # from the double the shape env computed it in
        raise CannotPrint(f"a float ({x!r}) in a Triton index expression")
