"""The lean launch path: each kernel launched on CUDA through a launcher made once per kernel, not through
`kernel[grid](...)`.

Triton's `JITFunction.run` does, on every launch: bind the arguments to the signature, compute each one's
specialization (type, 16-byte alignment, divisibility by 16, the value 1), look the kernel up by that key, ask the
driver for the current device and stream, and build the launch metadata. On a GPU that is about 18 us of Python per
launch; resnet50's 247 launches then cost twice its kernels' GPU time. ember's wrapper already knows everything but
the data pointers and sizes, so a launch can skip it all:

    def launch_ember_k0_add_pointwise_8x32(grid, stream, a0, a1, a2):
        if stream is None or (a0.data_ptr() | a1.data_ptr() | a2.data_ptr()) & 15:
            return jit[(grid,)](a0, a1, a2, XBLOCK=1024, num_warps=4)
        run(grid, 1, 1, stream, function, packed, None, None, None, a0, a1, a2, 1024)

`run`, `function` and `packed` are the compiled kernel's (its launcher, the loaded CUfunction, its packed metadata):
the call is the one `JITFunction.run` makes at its end, with the same arguments. The guard checks what the binary
was compiled for, read from how the build warmed it up (`_precompile.py`): pointers 16-byte aligned, each symbol
with the specialization of its traced hint (32-bit or 64-bit, divisible by 16 or not, the constant 1). A call the
binary does not fit (an input view at an odd offset, a size of another kind) takes Triton's own path, which
specializes and compiles as it always would: never a wrong binary, only a slower launch.

The wrapper reads the stream once per segment (`lean_stream`): None when the lean path may not run now — the
current device is not the one the kernels were loaded on, or a launch hook is set (Triton's profiler hooks see each
launch only through its own path). With no hook set, the lean call passes None for the launch metadata and both
hooks, which the launcher then skips; Triton's path passes its empty hook chains and a metadata dict nobody reads.

Everything here is ember's own text over argument positions (`a0`, `a1` ...): no name or value of the user's is
printed into a launcher.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """How Triton's JIT specialized one runtime argument of a compiled kernel.

    kind: `tensor`, `int` or `none` (a `None` argument: compiled as a constant, nothing to check).
    aligned: a tensor's data 16-byte aligned, an int divisible by 16.
    one: an int compiled as the constant 1.
    wide: an int passed as 64 bits (its hint was outside int32)."""

    kind: str
    aligned: bool = False
    one: bool = False
    wide: bool = False

    def misfits(self, name: str) -> list[str]:
        """Conditions, as Python text over the argument `name`, any of which means a value does not fit the
        binary; the tensors' alignment is tested by the caller, for all of them at once."""
        if self.kind != "int":
            return []
        if self.one:
            return [f"{name} != 1"]
        low, high = INT64 if self.wide else INT32
        return [f"not {low} <= {name} <= {high}"] + ([f"{name} & 15"] if self.aligned else [])


def spec_of(value: Any) -> ArgSpec:
    """The specialization Triton's JIT gives a warm-up argument (see `_precompile.warmup_args`): a torch dtype
    stands for a tensor the caching allocator gave (16-byte aligned); an int is specialized by its value, as
    Triton does (the constant 1; divisible by 16; int32 or int64)."""
    if value is None:
        return ArgSpec("none")
    if isinstance(value, bool):
        raise TypeError("a bool kernel argument has no lean launch (ember passes none)")
    if isinstance(value, int):
        if value == 1:
            return ArgSpec("int", one=True)
        return ArgSpec("int", aligned=value % 16 == 0, wide=not INT32[0] <= value <= INT32[1])
    return ArgSpec("tensor", aligned=True)


@dataclasses.dataclass(frozen=True)
class LaunchSignature:
    """A kernel's launch as the wrapper makes it: its runtime arguments (positions of the kernel's non-constexpr
    parameters, in order), and its constexpr parameters' values, by position among all parameters."""

    name: str
    specs: tuple[ArgSpec, ...]
    constexprs: tuple[tuple[int, Any], ...]  # (parameter position, value), in order
    meta: tuple[tuple[str, Any], ...]  # what Triton's own launch takes as keywords (block sizes, num_warps, debug)
    grid_dims: int = 1  # 2: `launch(grid, grid_y, stream, ...)` (a matmul template's tiles and batch)

    def source(self) -> str:
        """The launcher's Python source: `launch(grid, stream, a0, ...)` (`launch(grid, grid_y, stream, ...)` for a
        2-d grid), over the globals `run`, `function`, `packed` (the compiled kernel's) and `jit` (the kernel, for
        Triton's own path)."""
        grid = ["grid", "grid_y"][:self.grid_dims]
        args = [f"a{j}" for j in range(len(self.specs))]
        tensors = [a for a, s in zip(args, self.specs) if s.kind == "tensor" and s.aligned]
        tests = ["stream is None"]
        if tensors:
            tests.append(f"({' | '.join(f'{a}.data_ptr()' for a in tensors)}) & 15")
        for a, s in zip(args, self.specs):
            tests += s.misfits(a)
        every = list(args)
        for position, value in self.constexprs:
            every.insert(position, repr(value))
        keywords = [f"{k}={v!r}" for k, v in self.meta]
        dims = ", ".join([*grid, "1", "1"][:3])
        return "\n".join([
            f"def launch_{self.name}({', '.join([*grid, 'stream', *args])}):",
            f"    if {' or '.join(tests)}:",
            f"        return jit[({', '.join(grid)},)]({', '.join(args + keywords)})",
            f"    run({dims}, stream, function, packed, None, None, None, {', '.join(every)})",
        ]) + "\n"


def launch_signature(name: str, params: Sequence[tuple[str, bool]], warmup: Sequence[Any],
                     meta: dict[str, Any], grid_dims: int = 1) -> LaunchSignature:
    """The signature of kernel `name` with parameters `params` ((name, is_constexpr) in order), warmed up with the
    runtime arguments `warmup` and launched with the keywords `meta` (constexpr values by name, num_warps ...)
    on a grid of `grid_dims` dimensions."""
    runtime = [p for p, constexpr in params if not constexpr]
    if len(runtime) != len(warmup):
        raise ValueError(f"kernel {name} takes {len(runtime)} runtime arguments, the warm-up gave {len(warmup)}")
    constexprs = tuple((j, meta[p]) for j, (p, constexpr) in enumerate(params) if constexpr)
    return LaunchSignature(name, tuple(spec_of(v) for v in warmup), constexprs, tuple(sorted(meta.items())),
                           grid_dims)


def make_launcher(sig: LaunchSignature, compiled: Any, jit: Any) -> Callable[..., None]:
    """The launcher of `sig` for the compiled kernel `compiled` (what Triton's warm-up returned, loaded on the
    current device) and its `jit` function."""
    scope = {"run": compiled.run, "function": compiled.function, "packed": compiled.packed_metadata, "jit": jit}
    exec(compile(sig.source(), f"<ember launcher {sig.name}>", "exec"), scope)  # ember's own text (see above)
    return scope[f"launch_{sig.name}"]


def stream_reader(device: int, driver: Any, runtime: Any) -> Callable[[], int | None]:
    """`lean_stream()`: the current stream of `device` while the lean path may run (it is the current device, and
    `runtime` — Triton's `knobs.runtime` — has no launch hook set), else None."""
    get_device, get_stream = driver.get_current_device, driver.get_current_stream

    def lean_stream() -> int | None:
        current = get_device()
        if current != device or hooked(runtime.launch_enter_hook) or hooked(runtime.launch_exit_hook):
            return None
        return get_stream(current)

    return lean_stream


def hooked(hook: Any) -> bool:
    """Is a launch hook set? Triton 3.6 on keeps its hooks in a `HookChain`, empty when none is set; earlier ones
    hold one callable or None."""
    return hook is not None and bool(getattr(hook, "calls", True))
