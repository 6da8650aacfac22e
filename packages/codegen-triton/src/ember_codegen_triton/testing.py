"""Triton's GPU path without a GPU: a stand-in driver for tests and benchmarks on CPU-only machines.

    driver.set_active(StandInGPU())      # before anything compiles; Triton must not be in interpreter mode

Triton then compiles for an H100 (sm_90) through its whole pipeline (TTIR ... PTX, cubin with its bundled ptxas),
"loads" each binary as a name (the kernel's and its bytes' sha256), and launches through `StandInGPU.launcher_cls`,
which binds each launch's arguments to the kernel's parameters as Triton's CUDA launcher does and records the
launch instead of running it: kernel, grid, stream, binary, launch metadata, hooks and every argument, named by the
parameter the binary would read it as (`launches`). Kernels do not run, so outputs hold whatever their buffers
held; what can be checked is what was compiled and what each launch passed — which is what Triton's interpreter
cannot show (it runs kernels as Python on CPU tensors, no binary, no launcher).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

__all__ = ["StandInGPU", "bound", "described"]


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
        """Binds a launch's arguments as Triton's CUDA launcher does: by position, to the entries of the kernel's
        specialization signature (`src.signature`) in that mapping's order, the binary getting the non-constexpr
        ones in that order. The binary's parameters are the kernel's non-constexpr parameters in the kernel's
        order, so a signature in any other order hands one parameter's value to another (on a GPU, a pointer
        parameter given a block size writes near address 0). Each launch is recorded with its arguments as the
        binary's parameters receive them, by name; a value of the wrong kind for its signature type raises
        TypeError (the real launcher raises for a tensor given to an integer, and takes an integer as a pointer)."""

        def __init__(self, src: Any, metadata: Any):
            self.name = metadata.name
            self.types = list(src.signature.values())
            self.params = [p for p in src.fn.arg_names if src.signature[p] != "constexpr"]

        def __call__(self, gx, gy, gz, stream, function, packed, launch_metadata, enter, leave, *args) -> None:
            if len(args) != len(self.types):
                raise TypeError(f"{self.name}: {len(args)} arguments for a signature of {len(self.types)}")
            passed = [bound(self.name, k, ty, a) for k, (ty, a) in enumerate(zip(self.types, args))
                      if ty != "constexpr"]
            StandInGPU.launches.append((self.name, (gx, gy, gz), stream, function, launch_metadata, enter, leave,
                                        tuple(zip(self.params, map(described, passed), strict=True))))

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


def bound(kernel: str, position: int, type_: str, arg: Any) -> Any:
    """`arg`, checked to be what a parameter of signature type `type_` takes: a tensor for a pointer (`*fp32`), a
    number for a scalar (`i32`, `fp32`), an integer that fits its width."""
    pointer = type_.startswith("*")
    if pointer != isinstance(arg, torch.Tensor) or not (pointer or isinstance(arg, (int, float))):
        raise TypeError(f"{kernel}: argument {position} is a {type(arg).__name__} where the signature has {type_}")
    bits = {"i32": 31, "i64": 63}.get(type_)
    if bits and not -(2**bits) <= arg < 2**bits:  # the launcher parses it into a C integer of that width
        raise OverflowError(f"{kernel}: argument {position} is {arg}, out of range for {type_}")
    return arg


def described(arg: Any) -> Any:
    """A launch argument as recorded: a tensor by what a kernel reads of it (dtype, shape, strides, offset, and its
    data's misalignment to 16 bytes), anything else as it is."""
    if isinstance(arg, torch.Tensor):
        return ("tensor", arg.dtype, tuple(arg.shape), arg.stride(), arg.storage_offset(), arg.data_ptr() % 16)
    return arg
