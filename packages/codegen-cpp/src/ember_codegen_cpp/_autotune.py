"""`mode="max-autotune"` on the CPU: each kernel printed in several variants, the fastest kept per kernel and CPU.

`print_variants(program)` prints every kernel once per `Variant` its printer offers (another parallel threshold,
a never-forking loop, a larger tile, 256-bit vectors on an AVX-512 machine). The translation unit then holds, for
a kernel `k0` with variants, the variants `k0_v0, k0_v1, ...`, a table of them, and `k0` itself as a function
pointer the segment calls, set to the heuristics' `k0_v0` until two exported functions say otherwise:

    extern "C" int ember_try_k0(int variant, <k0's parameters>)  // runs one variant once
    extern "C" void ember_pick_k0(int variant)                   // the variant the segment calls from now on

The wrapper calls each segment's `TunedSegment` before the segment while it is `pending`, so only the first
call pays: it takes the stored choices from the shared `Tuner` (cache `cpp_tune`, keyed by the variants' text,
the compiler, its flags and the CPU), measures the kernels without one on the call's own arguments, and picks.
Measuring runs the segment once first (so a kernel's inputs made by the segment's earlier kernels hold real
values) and puts back every buffer the segment writes afterwards, so the call then runs exactly once on them.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Any

from ember_lowering.codegen import LazyBinding, PlanLayout, Program, Segment, Tuner

from ._kernel_printer import KernelPrinter
from ._variants import Variant

TUNER = Tuner("cpp_tune", "codegen-cpp", repeats=5)


def print_variants(program: Program, wide_vectors: bool) -> dict[str, list[tuple[tuple[int, ...], str]]]:
    """kernel name → (choice, text) of each variant, for the kernels with more than one."""
    out = {}
    for k in program.kernels:
        if k.ir is None:
            continue
        variants = KernelPrinter(k.ir, program.layout, k.name).variants(wide_vectors)
        if len(variants) > 1:
            out[k.name] = [(v.choice, KernelPrinter(k.ir, program.layout, f"{k.name}_v{j}", v).print().text)
                           for j, v in enumerate(variants)]
    return out


def dispatch_source(name: str, count: int, params: list[str], args: list[str]) -> list[str]:
    """The C++ that makes `name` a pointer to one of its `count` variants, and the two exported functions."""
    fn = f"decltype(&{name}_v0)"
    table = ", ".join(f"{name}_v{j}" for j in range(count))
    visible = 'extern "C" __attribute__((visibility("default")))'
    return [f"static {fn} const {name}_variants[] = {{{table}}};",
            f"static {fn} {name} = {name}_v0;",
            f"{visible} int ember_try_{name}({', '.join(['int ember_v', *params])}) {{",
            f"  return {name}_variants[ember_v]({', '.join(args)});",
            "}",
            f"{visible} void ember_pick_{name}(int ember_v) {{ {name} = {name}_variants[ember_v]; }}",
            ""]


class TunedSegment:
    """`_tune_<segment>(roots..., symbols...)`: picks each kernel's variant on the first call (see above)."""

    def __init__(self, program: Program, seg: Segment, lazy: LazyBinding, env: dict[str, Any], toolchain: str):
        self.seg, self.lazy, self.env = seg, lazy, env
        self.layout: PlanLayout = program.layout
        self.kernels = [(k, program.variants[k.name]) for k in seg.kernels if k.name in program.variants]
        self.keys = {k.name: _key(k.name, variants, toolchain) for k, variants in self.kernels}
        self.pending = bool(self.kernels)
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> None:
        with self._lock:
            if self.pending:
                self.lazy.load()  # UseFallback when the build failed: the wrapper runs its fallback
                self._tune(args)
                self.pending = False

    def _tune(self, args: tuple) -> None:
        lib = self.env["_library"]
        roots = self.seg.roots
        tensors, syms = dict(zip(roots, args)), list(args[len(roots):])
        todo = []
        for k, variants in self.kernels:
            choices = [c for c, _ in variants]
            stored = TUNER.stored(self.keys[k.name], choices)
            if stored is None:
                todo.append((k, choices))
            else:
                getattr(lib, f"ember_pick_{k.name}")(choices.index(stored))
        if not todo:
            return
        written = [tensors[r] for r in roots if r in self.seg.writes]
        before = [t.clone() for t in written]
        self.env[self.seg.name](*[tensors[r].data_ptr() for r in roots], *syms)  # real inputs for every kernel
        for k, choices in todo:
            run = getattr(lib, f"ember_try_{k.name}")
            run.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * len(k.roots) + [ctypes.c_int64] * len(syms)
            run.restype = ctypes.c_int
            pointers = [tensors[r].data_ptr() for r in k.roots]
            best = TUNER.measure(self.keys[k.name], k.name, choices,
                                lambda c, run=run, pointers=pointers, choices=choices:
                                run(choices.index(c), *pointers, *syms),
                                [tensors[r] for r in k.roots if r in k.writes])
            getattr(lib, f"ember_pick_{k.name}")(choices.index(best))
        for t, saved in zip(written, before):
            t.copy_(saved)


def _key(name: str, variants: list[tuple[tuple[int, ...], str]], toolchain: str) -> str:
    """The kernel's variants without its name (the same kernel in another graph or position shares the choice),
    with what decides their speed besides the source: compiler, flags, CPU."""
    text = "\0".join([toolchain, *(repr(c) + t.replace(name, "k") for c, t in variants)])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


__all__ = ["TUNER", "TunedSegment", "Variant", "dispatch_source", "print_variants"]
