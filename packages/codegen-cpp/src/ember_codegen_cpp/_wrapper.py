"""The C++ codegen's wrapper: the shared `WrapperWriter`, calling each segment through ctypes with the roots'
data pointers and the symbols as int64 values; a nonzero result is a kernel's error flag.

    if ember_seg0(b_x_1.data_ptr(), b_out.data_ptr(), S_s0):
        return _on_error(inputs)

Under a max-autotune mode a segment with kernel variants is preceded by its `TunedSegment` (`_autotune.py`),
which does its work on the first call only:

    if _tune_ember_seg0.pending:
        _tune_ember_seg0(b_x_1, b_out, S_s0)

A float32 matmul that oneDNN runs faster on this CPU (`_gemm.py`) is called there instead of ATen's:

    b_mm = _onednn_linear0(b_x, b_w.t(), None, 'none', [], '')  # aten.mm.default

The profiled twin of the wrapper (see the shared `WrapperWriter`) calls the segment's kernels one at a time, each
in a profiler range, through the entry point the library exports for each kernel (`ember_run_<kernel>`, see
`_program.py`): a kernel's time is then the profiler's to measure, with no timer in the C++ and nothing added to
the segment calls of the normal path.

    with _range('k0_softmax_reduce_8x32'):
        if ember_run_k0_softmax_reduce_8x32(b_x_1.data_ptr(), b_out.data_ptr()):
            return _on_error(inputs)
"""

from __future__ import annotations

import torch
from ember_core import direct_call
from ember_lowering import Extern
from ember_lowering.codegen import Segment, WrapperWriter

from ._gemm import linear_form, on_onednn
from ._program import entry_point


class CppWrapperWriter(WrapperWriter):
    """`signatures` (segment → (pointer args, int64 args)) is what the loader sets as each function's argtypes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.signatures: dict[str, tuple[int, int]] = {}

    def extern_call(self, ext: Extern) -> str:
        form = linear_form(ext, self.layout.buffers)
        if form is None or not on_onednn(form, self.p.options):
            return super().extern_call(ext)
        linear = self.const(direct_call(torch.ops.mkldnn._linear_pointwise.default), "_onednn_linear")
        a, b = (self._arg(r) for r in ext.args[-2:])
        bias = self._arg(ext.args[0]) if form.bias is not None else "None"
        return f"{linear}({a}, {b}.t(), {bias}, 'none', [], '')"

    def call_segment(self, seg: Segment) -> None:
        self._tune_first(seg)
        self._call(seg.name, seg.roots)

    def call_segment_profiled(self, seg: Segment) -> None:
        self._tune_first(seg)
        for k in seg.kernels:
            with self.ranged(k.name):
                self._call(entry_point(k.name), k.roots)

    def _tune_first(self, seg: Segment) -> None:
        if any(k.name in self.p.variants for k in seg.kernels):  # max-autotune: pick the variants first
            tensors = [self.const(self.constants[r], "_c") if self.layout.buffers[r].kind == "constant"
                       else self.tensor(r) for r in seg.roots]
            self.emit(f"if _tune_{seg.name}.pending:")
            syms = [self.layout.sym_local[s] for s in self.layout.symbols]
            self.emit(f"_tune_{seg.name}({', '.join(tensors + syms)})", 3)

    def _call(self, fn: str, roots: tuple[str, ...]) -> None:
        """`fn(pointers of roots..., symbols...)`, its error flag checked."""
        args = []
        for r in roots:
            if self.layout.buffers[r].kind == "constant":
                args.append(self.const(self.constants[r].data_ptr(), "_p"))
            else:
                args.append(f"{self.tensor(r)}.data_ptr()")
        args += [self.layout.sym_local[s] for s in self.layout.symbols]
        self.signatures[fn] = (len(roots), len(self.layout.symbols))
        self.emit(f"if {fn}({', '.join(args)}):")
        self.emit("return _on_error(inputs)", 3)
