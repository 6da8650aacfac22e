"""The Triton codegen's wrapper: the shared `WrapperWriter`, launching each kernel of a segment on its grid.

    _n = (S_s0 * 7)
    if _n > 0:
        k0_pointwise_s0x7[(_cdiv(_n, 1024),)](b_x_1, b_out, S_s0, XBLOCK=1024)

Kernels take the root tensors themselves (Triton reads their data pointers) and the plan's symbols as ints. A
kernel with indirect indices also takes a fresh error flag, read after it runs: set, the graph runs in the
interpreter codegen, where torch raises its own index error.
"""

from __future__ import annotations

from ember_lowering.codegen import Segment, WrapperWriter

from ._kernel_printer import TritonKernel


class TritonWrapperWriter(WrapperWriter):
    def call_segment(self, seg: Segment) -> None:
        syms = [self.layout.sym_local[s] for s in self.layout.symbols]
        for k in seg.kernels:
            assert isinstance(k, TritonKernel)
            args = [self.tensor(r) for r in k.roots] + (["_err"] if k.checks else []) + syms
            args += [f"XBLOCK={k.xblock}", f"num_warps={k.warps}"]
            if k.rblock:
                args.append(f"RBLOCK={k.rblock}")
            if k.checks:
                self.emit(f"_err = _error_flag({self.tensor(k.roots[0])}.device)")
            self.emit(f"_n = {self.py(k.numel)}")
            self.emit("if _n > 0:")
            self.emit(f"{k.name}[(_cdiv(_n, {k.xblock}),)]({', '.join(args)})", 3)
            if k.checks:  # reading the flag waits for the kernel: only kernels with indirect indices pay it
                self.emit("if _err.item():")
                self.emit("return _on_error(inputs)", 3)
