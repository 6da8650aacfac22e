"""`libdevice` for Triton's interpreter. Compiled for a GPU, kernels call CUDA's libdevice; Triton's CPU
interpreter (`TRITON_INTERPRET=1`) has no implementation of those functions. There a kernel body runs as Python on
numpy arrays, so this module gives each function the generated kernels use, computed by torch's own CPU kernels
on the block's data: results equal eager's. Kernels generated under the interpreter import it in place of
`triton.language.extra.libdevice` (the module's source says which, so the two never share a cache entry)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle


def _wrap(data: np.ndarray, like: tl.tensor) -> tl.tensor:
    scalar = like.dtype if data.dtype == _np_dtype(like) else _tl_scalar(data.dtype)
    ty = tl.block_type(scalar, list(data.shape)) if data.ndim else scalar
    return tl.tensor(TensorHandle(np.ascontiguousarray(data), scalar), ty)


def _np_dtype(t: tl.tensor) -> np.dtype:
    return t.handle.data.dtype


def _tl_scalar(dtype: np.dtype) -> tl.dtype:
    return {np.dtype(np.float32): tl.float32, np.dtype(np.float64): tl.float64, np.dtype(np.bool_): tl.int1,
            np.dtype(np.int32): tl.int32, np.dtype(np.int64): tl.int64}[np.dtype(dtype)]


def _unary(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[tl.tensor], tl.tensor]:
    def apply(x: tl.tensor) -> tl.tensor:
        return _wrap(fn(torch.from_numpy(np.array(x.handle.data))).numpy(), x)

    return apply


def _binary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[tl.tensor, tl.tensor], tl.tensor]:
    def apply(a: tl.tensor, b: tl.tensor) -> tl.tensor:
        x, y = torch.from_numpy(np.array(a.handle.data)), torch.from_numpy(np.array(b.handle.data))
        return _wrap(fn(x, y).numpy(), a)

    return apply


class libdevice:  # noqa: N801 - stands in for the module of that name
    expm1 = staticmethod(_unary(torch.expm1))
    log1p = staticmethod(_unary(torch.log1p))
    log10 = staticmethod(_unary(torch.log10))
    tan = staticmethod(_unary(torch.tan))
    asin = staticmethod(_unary(torch.asin))
    acos = staticmethod(_unary(torch.acos))
    atan = staticmethod(_unary(torch.atan))
    sinh = staticmethod(_unary(torch.sinh))
    cosh = staticmethod(_unary(torch.cosh))
    tanh = staticmethod(_unary(torch.tanh))
    asinh = staticmethod(_unary(torch.asinh))
    acosh = staticmethod(_unary(torch.acosh))
    atanh = staticmethod(_unary(torch.atanh))
    erfc = staticmethod(_unary(torch.erfc))
    erfinv = staticmethod(_unary(torch.erfinv))
    lgamma = staticmethod(_unary(torch.lgamma))
    rint = staticmethod(_unary(torch.round))
    trunc = staticmethod(_unary(torch.trunc))
    signbit = staticmethod(_unary(lambda x: torch.signbit(x).to(torch.int32)))
    pow = staticmethod(_binary(torch.pow))
    atan2 = staticmethod(_binary(torch.atan2))
    copysign = staticmethod(_binary(torch.copysign))
    fmod = staticmethod(_binary(torch.fmod))
