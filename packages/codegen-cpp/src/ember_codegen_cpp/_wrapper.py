"""The C++ codegen's wrapper: the shared `WrapperWriter`, calling each segment through ctypes with the roots'
data pointers and the symbols as int64 values; a nonzero result is a kernel's error flag.

    if ember_seg0(b_x_1.data_ptr(), b_out.data_ptr(), S_s0):
        return _on_error(inputs)
"""

from __future__ import annotations

from ember_lowering.codegen import Segment, WrapperWriter


class CppWrapperWriter(WrapperWriter):
    """`signatures` (segment → (pointer args, int64 args)) is what the loader sets as each function's argtypes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.signatures: dict[str, tuple[int, int]] = {}

    def call_segment(self, seg: Segment) -> None:
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
