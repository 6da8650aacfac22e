"""Triton's GPU path without a GPU: a stand-in driver for tests and benchmarks on CPU-only machines.

    driver.set_active(StandInGPU())      # before anything compiles; Triton must not be in interpreter mode

Triton then compiles for an H100 (sm_90) through its whole pipeline (TTIR ... PTX, cubin with its bundled ptxas),
"loads" each binary as a name (the kernel's and its bytes' sha256), and launches through `StandInGPU.launcher_cls`,
which records each launch instead of running it: kernel, grid, stream, binary, launch metadata, hooks and every
argument (`launches`). Kernels do not run, so outputs hold whatever their buffers held; what can be checked is what
was compiled and what each launch passed — which is what Triton's interpreter cannot show (it runs kernels as Python
on CPU tensors, no binary, no launcher).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

__all__ = ["StandInGPU", "described"]


class StandInGPU:
    """What Triton's JIT asks of a driver to compile and launch, for an sm_90 device 0 whose stream is 0."""

    launches: list[tuple] = []  # (kernel, grid, stream, binary, launch metadata, enter hook, exit hook, args)
    loaded: list[str] = []  # each binary "loaded", in order

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    class launcher_cls:  # noqa: N801 - the attribute Triton asks for
        def __init__(self, src: Any, metadata: Any):
            self.name = metadata.name

        def __call__(self, gx, gy, gz, stream, function, packed, launch_metadata, enter, leave, *args) -> None:
            StandInGPU.launches.append((self.name, (gx, gy, gz), stream, function, launch_metadata, enter, leave,
                                        tuple(map(described, args))))

    class utils:  # noqa: N801 - the attribute Triton asks for
        @staticmethod
        def load_binary(name: str, kernel: bytes, shared: int, device: int):
            StandInGPU.loaded.append(name)
            function = f"{name}#{hashlib.sha256(kernel).hexdigest()[:12]}"  # the binary, by its bytes
            return object(), function, 32, 0, 1024  # module, function, registers, spills, threads

        @staticmethod
        def unload_module(module: Any) -> None:
            pass

        @staticmethod
        def get_device_properties(device: int) -> dict[str, int]:
            return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}


def described(arg: Any) -> Any:
    """A launch argument as recorded: a tensor by what a kernel reads of it (dtype, shape, strides, offset, and its
    data's misalignment to 16 bytes), anything else as it is."""
    if isinstance(arg, torch.Tensor):
        return ("tensor", arg.dtype, tuple(arg.shape), arg.stride(), arg.storage_offset(), arg.data_ptr() % 16)
    return arg
