"""The ways max-autotune prints one C++ kernel (`Variant`), and which it tries for a kernel (`kernel_variants`)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy
from ember_core import as_sympy
from ember_lowering import Kernel, Loop, Op

from ._libm import LIBM_OPS
from ._prelude import PAR_MIN

SERIAL = 1 << 62  # a parallel threshold no loop reaches: the kernel never forks


@dataclass(frozen=True)
class Variant:
    """One way to print a kernel; the default is the heuristics' choice. `par_min`: element-iterations from which
    the parallel loop forks (0: `EMBER_PAR_MIN`); `tile`: `CHUNK` (pointwise) or `BLOCK` (outer-contiguous
    reduction) times this; `vector_bits`: the widest vectors the compiler should prefer (0: the build's, the CPU's
    native width (`_build.machine_flags`); 256 on an AVX-512 machine keeps to ymm registers)."""

    par_min: int = 0
    tile: int = 1
    vector_bits: int = 0

    @property
    def choice(self) -> tuple[int, int, int]:
        return (self.par_min, self.tile, self.vector_bits)


DEFAULT = Variant()  # the heuristics' choice


def kernel_variants(kernel: Kernel, outer_contiguous: bool, wide_vectors: bool) -> list[Variant]:
    """What max-autotune tries for `kernel`, the default first: where there is a parallel loop, the other side of
    the fork (of static sizes: serial where the heuristics fork, parallel where they do not; of symbolic ones: a
    lower threshold and never) and a larger tile (a pointwise kernel, or an outer-contiguous reduction's block);
    256-bit vectors on a machine with wider ones (`wide_vectors`)."""
    out = [Variant()]
    if kernel.outer_dims or kernel.reduce_dims:
        work = _parallel_work(kernel)
        if work is None:
            out += [Variant(par_min=4096), Variant(par_min=SERIAL)]
        else:
            out.append(Variant(par_min=SERIAL) if work >= PAR_MIN else Variant(par_min=1))
        if not kernel.reduce_dims or outer_contiguous:
            out.append(Variant(tile=4))
    if wide_vectors and not _calls_libm(kernel):
        out.append(Variant(vector_bits=256))
    return out


def _calls_libm(kernel: Kernel) -> bool:
    """Whether the kernel calls a libm function (tanh, sin, pow ...). Such a kernel keeps the native vector width:
    libmvec's 8- and 16-lane forms of a function are different code (asinh and acosh differ by an ulp at some
    values; cosh and exp2 call the 8-lane form at both widths; tanh is ember's with 16 lanes and libmvec's with 8),
    and a value the backward recomputes must come out with the bits the forward's kernel gave it (a max's gradient
    compares the two)."""
    return any(i.op in LIBM_OPS or i.op is Op.POW for s in kernel.body
               for i in (s.body if isinstance(s, Loop) else (s,)))


def _parallel_work(kernel: Kernel) -> int | None:
    """The element-iterations the parallel loop's fork test compares with the threshold, when static."""
    loops = sum(1 for s in kernel.body if isinstance(s, Loop)) if kernel.outer_dims else 1
    work = sympy.Mul(*[as_sympy(d.size) for d in kernel.dims]) * max(loops, 1)
    return int(work) if work.is_Integer else None
