"""The C++ codegen's wrapper: the shared `WrapperWriter`, calling each segment through ctypes with the roots'
data pointers and the symbols as int64 values; a nonzero result is a kernel's error flag.

    if ember_seg0(b_x_1.data_ptr(), b_out.data_ptr(), S_s0):
        return _on_error(inputs)

Under a max-autotune mode a segment with kernel variants is preceded by its `TunedSegment` (`_autotune.py`),
which does its work on the first call only:

    if _tune_ember_seg0.pending:
        _tune_ember_seg0(b_x_1, b_out, S_s0)
"""

from __future__ import annotations

from ember_lowering.codegen import Segment, WrapperWriter


class CppWrapperWriter(WrapperWriter):
    """`signatures` (segment → (pointer args, int64 args)) is what the loader sets as each function's argtypes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.signatures: dict[str, tuple[int, int]] = {}

    def call_segment(self, seg: Segment) -> None:
        if any(k.name in self.p.variants for k in seg.kernels):  # max-autotune: pick the variants first
            tensors = [self.const(self.constants[r], "_c") if self.layout.buffers[r].kind == "constant"
                       else self.tensor(r) for r in seg.roots]
            self.emit(f"if _tune_{seg.name}.pending:")
            syms = [self.layout.sym_local[s] for s in self.layout.symbols]
            self.emit(f"_tune_{seg.name}({', '.join(tensors + syms)})", 3)
        args = []
        for r in seg.roots:
            if self.layout.buffers[r].kind == "constant":
                args.append(self.const(self.constants[r].data_ptr(), "_p"))
            else:
                args.append(f"{self.tensor(r)}.data_ptr()")
        args += [self.layout.sym_local[s] for s in self.layout.symbols]
        self.signatures[seg.name] = (len(seg.roots), len(self.layout.symbols))
        self.emit(f"if {seg.name}({', '.join(args)}):")
        self.emit("return _on_error(inputs)", 3)
