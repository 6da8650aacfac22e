"""The Triton codegen's wrapper: the shared `WrapperWriter`, launching each kernel of a segment on its grid.

    _n = (S_s0 * 7)
    if _n > 0:
        k0_pointwise_s0x7[(_cdiv(_n, 1024),)](b_x_1, b_out, S_s0, XBLOCK=1024)

On CUDA each kernel launches through its lean launcher instead (`_launcher.py`), the stream read once per segment:

    _stream = _lean_stream()
    _n = (S_s0 * 7)
    if _n > 0:
        _launch_k0_pointwise_s0x7(_cdiv(_n, 1024), _stream, b_x_1, b_out, S_s0)  # XBLOCK=1024, num_warps=4

Kernels take the root tensors themselves (Triton reads their data pointers) and the plan's symbols as ints. In the
wrapper's profiled twin (see the shared `WrapperWriter`) each launch is inside a profiler range named after its
kernel, which on CUDA is also the name the GPU trace shows for the kernel itself.

A kernel with indirect indices (a gather) catches an index out of range one of two ways:
- on CUDA, as eager's CUDA kernels and Inductor's do: it launches with `debug=True`, so its device asserts are
  compiled in and stop it (an asynchronous, sticky CUDA error). Nothing waits for the kernel: the wrapper stays
  free of host syncs, as CUDA graphs and running ahead of the GPU need.
- on CPU tensors (Triton's interpreter), or on CUDA with option `triton.sync_index_checks`: it takes a fresh error
  flag, read after it runs (a sync); set, the graph runs in the interpreter codegen, where torch raises its own
  `IndexError`, as eager does on the CPU.
"""

from __future__ import annotations

from ember_lowering import Extern
from ember_lowering.codegen import Segment, WrapperWriter, tuning_mode

from ._kernel_printer import TritonKernel


class TritonWrapperWriter(WrapperWriter):
    """Under a max-autotune mode each launch goes through `_tune_<kernel>(n, args...)` (`_autotune.py`), which
    picks the block size and warps; otherwise the heuristic's are written into the launch.

    Under a max-autotune mode an extern GEMM with a matmul template (`_gemm.py`, the program's `fused_externs`)
    first offers the template, which says whether it ran (the measured choice); if not, the extern call and the
    kernel after it run as they would have:

        _g2 = _gemm_ember_k3_add_pointwise_64x48_mm((1, 64, 48), (b_x, b_buf0), b_x, b_w, b_b, b_add_1)
        if _g2:
            b_mm = None
        else:
            b_mm = _op0(b_x, b_buf0)  # aten.mm.default
            ...
        if not _g2:
            _n = 3072
            if _n > 0:
                _tune_ember_k3_add_pointwise_64x48(_n, b_mm, b_b, b_add_1)
    """

    cpu_fast_paths = False  # its CPU plans (Triton's interpreter) print the wrapper a GPU runs

    lean = False  # launch through the lean launchers (`_launcher.py`); the codegen sets it per program

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a template addresses the GEMM's operands itself: the wrapper checks their layouts as it does a kernel's
        self.kernel_roots |= {r for t in self.templates.values() for r in t.roots}

    @property
    def tuned(self) -> bool:
        return tuning_mode(self.p.options)

    @property
    def debug(self) -> bool:
        """Launch with `debug=True` (option `triton.debug`): Triton compiles the kernels' device asserts in."""
        return bool(self.p.options.get("triton.debug"))

    @property
    def sync_checks(self) -> bool:
        """Do kernels with indirect indices raise an error flag that the wrapper reads (see above)?"""
        return sync_checks(self.p.plan.device, self.p.options)

    @property
    def templates(self) -> dict:
        """Program step index of an extern GEMM → its matmul template (`_gemm.GemmTemplate`), when tuning."""
        return self.p.fused_externs if self.tuned else {}

    def call_extern(self, index: int, ext: Extern) -> None:
        t = self.templates.get(index)
        if t is None:
            return super().call_extern(index, ext)
        self._allocate(t.writes)
        if t.stores_product:  # an extern's result: no kernel owns it, the template writes it here
            b = self.layout.buffers[t.product]
            self.emit(f"{self.layout.local[t.product]} = _empty_strided({self.tup(b.shape)}, {self.tup(b.stride)}, "
                      f"dtype={self.dtype(b.dtype)}, device=_device)")
            self.have.add(t.product)
        sizes = f"({', '.join(self.py(s) for s in t.sizes[:3])})"
        extern_args = ", ".join(self._arg(a) for a in ext.args) + ("," if len(ext.args) == 1 else "")
        args = [self.tensor(r) for r in t.roots] + [self.layout.sym_local[s] for s in self.layout.symbols]
        with self.ranged(t.name):
            self.emit(f"_g{index} = _gemm_{t.name}({', '.join([sizes, f'({extern_args})', *args])})")
        if t.stores_product:
            self.emit(f"if not _g{index}:")
        else:
            self.emit(f"if _g{index}:")
            self.emit(f"{self.layout.local[t.product]} = None", 3)
            self.emit("else:")
        self.indent += 1
        try:
            super().call_extern(index, ext)
        finally:
            self.indent -= 1

    def call_segment(self, seg: Segment) -> None:
        self._read_stream(seg)
        for k in seg.kernels:
            self.launch(k)

    def call_segment_profiled(self, seg: Segment) -> None:
        """Each launch in a profiler range named after its kernel (on CUDA the kernel itself has that name)."""
        self._read_stream(seg)
        for k in seg.kernels:
            with self.ranged(k.name):
                self.launch(k)

    def _read_stream(self, seg: Segment) -> None:
        if self.lean and not self.tuned and seg.kernels:
            self.emit("_stream = _lean_stream()")

    def launch(self, k: TritonKernel) -> None:
        """Emit one kernel's launch (and its error flag's check); a matmul template's epilogue only where the
        template did not run."""
        assert isinstance(k, TritonKernel)
        fused = next((j for j, t in self.templates.items() if t.epilogue == k.name), None)
        if fused is None:
            return self._launch(k)
        self.emit(f"if not _g{fused}:")
        self.indent += 1
        try:
            self._launch(k)
        finally:
            self.indent -= 1

    def _launch(self, k: TritonKernel) -> None:
        syms = [self.layout.sym_local[s] for s in self.layout.symbols]
        flag = k.checks and self.sync_checks
        args = [self.tensor(r) for r in k.roots] + (["_err" if flag else "None"] if k.checks else []) + syms
        meta = [f"{key}={value!r}" for key, value in launch_meta(k, self.debug, self.sync_checks).items()]
        if flag:
            self.emit(f"_err = _error_flag({self.tensor(k.roots[0])}.device)")
        self.emit(f"_n = {self.py(k.numel)}")
        self.emit("if _n > 0:")
        if self.tuned:
            self.emit(f"_tune_{k.name}({', '.join(['_n', *args])})", 3)
        elif self.lean:
            launch = f"_launch_{k.name}({', '.join([f'_cdiv(_n, {k.xblock})', '_stream', *args])})"
            self.emit(f"{launch}  # {', '.join(meta)}", 3)
        else:
            self.emit(f"{k.name}[(_cdiv(_n, {k.xblock}),)]({', '.join(args + meta)})", 3)
        if flag:  # reading the flag waits for the kernel
            self.emit("if _err.item():")
            self.emit("return _on_error(inputs)", 3)


def launch_meta(k: TritonKernel, debug: bool, sync: bool) -> dict[str, object]:
    """The keywords of `k`'s launch through Triton: its block sizes, warps, and `debug` where it launches so."""
    meta: dict[str, object] = {"XBLOCK": k.xblock, "num_warps": k.warps}
    if k.rblock:
        meta["RBLOCK"] = k.rblock
    if launch_debug(k, debug, sync):
        meta["debug"] = True
    return meta


def sync_checks(device: str, options: dict) -> bool:
    """Whether a gather kernel raises an error flag that the wrapper reads after it, on `device` (see above)."""
    return not device.startswith("cuda") or bool(options.get("triton.sync_index_checks"))


def launch_debug(k: TritonKernel, debug: bool, sync: bool) -> bool:
    """Does `k` launch with `debug=True`: everything in debug mode, and gathers on CUDA that read no flag."""
    return debug or (k.checks and not sync)
