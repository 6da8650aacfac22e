"""CPU cost of one Triton kernel launch: Triton's own `kernel[grid](...)` against ember's lean launcher
(ember_codegen_triton/_launcher.py), side by side in one process, medians over repeats.

With CUDA it launches a real pointwise kernel (3 tensors, a size) on 1024 elements; each repeat times a loop of
back-to-back launches and synchronizes at its end, so that with launches this small the loop measures the CPU side.
Without CUDA it uses the stand-in sm_90 driver (ember_codegen_triton.testing): the binary is compiled for real and
launches go to a launcher that does nothing, so the numbers are the Python each path runs per launch — the part the
lean launcher removes — without the driver's own cost.

Usage: python benchmarks/triton_launch.py [--launches 2000] [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.pop("TRITON_INTERPRET", None)  # the interpreter has no binaries and no launcher

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from ember_codegen_triton._launcher import launch_signature, make_launcher, stream_reader  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402


@triton.jit
def axpy(x, y, out, n, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) * 2.0 + tl.load(y + i, mask=i < n), mask=i < n)


def stand_in() -> None:
    from ember_codegen_triton.testing import StandInGPU

    class Idle(StandInGPU):
        class launcher_cls:  # noqa: N801
            def __init__(self, src, metadata):
                pass

            def __call__(self, *args):
                pass

    driver.set_active(Idle())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda:
        stand_in()
    device = "cuda" if cuda else "cpu"
    n = 1024
    x, y, out = (torch.randn(n, device=device) for _ in range(3))
    meta = {"XBLOCK": 1024, "num_warps": 4}
    compiled = axpy.warmup(torch.float32, torch.float32, torch.float32, n, grid=(1,), **meta)
    params = [(p.name, bool(p.is_constexpr)) for p in axpy.params]
    lean = make_launcher(launch_signature("axpy", params, [torch.float32] * 3 + [n], meta), compiled, axpy)
    read_stream = stream_reader(driver.active.get_current_device(), driver.active, triton.knobs.runtime)
    grid = triton.cdiv(n, 1024)

    def tritons() -> None:
        for _ in range(args.launches):
            axpy[(grid,)](x, y, out, n, **meta)

    def embers() -> None:
        stream = read_stream()  # once per segment in a wrapper; once per launch here would be the worst case
        for _ in range(args.launches):
            lean(grid, stream, x, y, out, n)

    variants = {"triton kernel[grid]": tritons, "ember lean launcher": embers}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        fn()
    for _ in range(args.repeats):
        for name, fn in variants.items():  # taking turns: a noisy neighbour slows both alike
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / args.launches * 1e6)
    where = torch.cuda.get_device_name() if cuda else "no GPU: stand-in sm_90 driver, launches dropped"
    print(f"# per-launch time, median of {args.repeats} x {args.launches} launches; triton {triton.__version__}, "
          f"torch {torch.__version__}; {where}")
    base = statistics.median(samples["triton kernel[grid]"])
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:22s} {median:8.2f} us   {base / median:5.2f}x")


if __name__ == "__main__":
    main()
