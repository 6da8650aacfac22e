"""What the CPU benchmarks share: fresh processes with fresh compile caches, variants timed in turns, medians,
the README's sections. Imports neither torch nor ember, so a child can point the caches elsewhere before they load.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def use_fresh_caches(prefix: str = "ember-bench-") -> None:
    """Point Inductor's, ember's and Triton's disk caches at a new temporary folder (removed at exit), so the first
    call of each compiler is a cold compile. Call before torch and ember are imported."""
    root = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
                      EMBER_CACHE_DIR=os.path.join(root, "ember"), TRITON_CACHE_DIR=os.path.join(root, "triton"),
                      TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")


def child_env() -> dict[str, str]:
    """The environment of a measuring child. glibc's malloc thresholds are fixed (mmap above 32 MiB, no trimming):
    with the defaults, whether a 16 MiB output comes from reused heap or from fresh pages (4096 page faults a call)
    depends on what the variants measured before it allocated, which moved eager's time 4x between processes."""
    return dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(1 << 40))


def run_child(script: str, args: list[str], timeout_s: float | None = None, env: dict[str, str] | None = None
              ) -> dict:
    """Run `script --child ARGS` in a fresh process (environment `env`, default `child_env()`); its last stdout line
    starting with `{` is its JSON result."""
    cmd = [sys.executable, script, "--child", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env() if env is None else env,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(args)}: no result within {timeout_s:.0f} s") from e
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def first_call_s(fn: Callable, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def timed(fns: dict[str, Callable], args: tuple, repeats: int, loop_s: float = 0.2) -> dict[str, float]:
    """Median seconds per call of each function. Each repeat runs every function in turn (a loop of about `loop_s`
    seconds each), so drift in the machine's speed reaches all of them alike."""
    calls = {name: max(1, int(loop_s / max(first_call_s(fn, *args), 1e-6))) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn(*args)
            samples[name].append((time.perf_counter() - start) / calls[name])
    return {n: statistics.median(s) for n, s in samples.items()}


def spread(values: list[float]) -> str:
    """`min–max` of per-process values, empty for one process."""
    return f"{min(values):.2f}–{max(values):.2f}" if len(values) > 1 else ""


def cpu_codegen() -> str:
    from ember_core import get_plugin_manager

    return get_plugin_manager().registry.find("codegen", device="cpu").name


# AMD's CPU families by core generation: a VM may name its CPU only "AMD EPYC", and Zen 4 and Zen 5 machines of
# that name differ 2x in vector math and GEMM speed
_AMD_FAMILIES = {23: "Zen 1/2", 25: "Zen 3/4", 26: "Zen 5"}


def machine(cpuinfo: str | None = None) -> str:
    """The CPU a measurement ran on, for the heading of the section it writes (a claim holds for the machines it
    was measured on): its model name (with its family and model numbers, and for AMD the core generation, where
    the name carries no model number), the vector ISAs that decide kernel speed, and its core count. `cpuinfo`:
    the text of /proc/cpuinfo (read when None)."""
    import os
    import platform

    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    family, number = fields.get("cpu family", ""), fields.get("model", "")
    if not any(c.isdigit() for c in model) and family.isdigit() and number.isdigit():
        generation = _AMD_FAMILIES.get(int(family)) if fields.get("vendor_id") == "AuthenticAMD" else None
        model += f" ({generation + ', ' if generation else ''}family {family}, model {number})"
    if "avx512f" in flags:
        extras = [name for flag, name in (("avx512_bf16", "BF16"), ("avx512_fp16", "FP16")) if flag in flags]
        isa = "AVX-512" + (f" ({', '.join(extras)})" if extras else "")
    else:
        isa = "AVX2" if "avx2" in flags else "NEON" if "asimd" in flags else platform.machine()
    isa += " + AMX" if "amx_tile" in flags else ""
    return f"{model}, {isa}, {os.cpu_count()} cores"


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace (or append) the section under `heading`, leaving the other sections alone."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(f"\n{heading}\n")
    section = f"\n{heading}\n\n{body}\n"
    if start == -1:
        text = text.rstrip("\n") + "\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end:] if end != -1 else "")
    path.write_text(text)


def cuda_events(fn: Callable, calls: int) -> list:
    """The CUDA kernels and copies that `calls` calls of `fn` ran, from torch.profiler (CUPTI), after one call
    outside the profiler."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == DeviceType.CUDA]


def cuda_kernel_table(fn: Callable, calls: int = 3, top: int = 15) -> list[dict]:
    """Where a call's GPU time goes: the `top` kernels (and copies) by total duration over `calls` calls, each with
    its milliseconds and launches per call."""
    totals: dict[str, list[float]] = {}
    for e in cuda_events(fn, calls):
        row = totals.setdefault(e.name, [0.0, 0])
        row[0] += e.time_range.elapsed_us()
        row[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return [{"kernel": name[:100], "ms": us / 1e3 / calls, "launches": n / calls} for name, (us, n) in ranked]


def cuda_kernel_seconds(fn: Callable, calls: int = 20) -> float:
    """The GPU's busy time per call of `fn`: the durations of the CUDA kernels and copies that `calls` calls ran,
    divided by `calls`."""
    return sum(e.time_range.elapsed_us() for e in cuda_events(fn, calls)) / 1e6 / calls


WRONG = {"float32": 1e-2}  # normwise error against eager above which a variant's result is wrong; 0.1 otherwise


def outcome(call: Callable[[], Any], params: Sequence = ()) -> list:
    """What one call gives, for `error`: its tensor outputs (a training step's call returns its loss, having run
    the backward), then the gradient each of `params` got; their earlier gradients are cleared first."""
    for p in params:
        p.grad = None
    out = call()
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [o.detach() for o in outs if hasattr(o, "detach")] + [
        p.new_empty(0) if p.grad is None else p.grad for p in params]


def error(got: list, want: list) -> float:
    """The largest normwise relative error of tensors `got` against eager's `want`, in float32 (1.0 where their
    shapes differ): a kernel that wrote the wrong place or read garbage gives about 1 or more, bfloat16's rounding
    about 1e-2. A tensor of values near zero beside the others' (a bias before a batch norm, whose gradient is 0
    but for rounding) is measured against 1e-4 of the largest root-mean-square value instead of its own norm."""
    if [g.shape for g in got] != [w.shape for w in want]:
        return 1.0
    got, want = [g.detach().float().cpu() for g in got], [w.detach().float().cpu() for w in want]
    rms = max([float(w.norm()) / max(w.numel(), 1) ** 0.5 for w in want], default=0.0)
    return max([float((g - w).norm()) / max(float(w.norm()), 1e-4 * rms * w.numel() ** 0.5, 1e-30)
                for g, w in zip(got, want)], default=0.0)


def wrong(errors: dict[str, float], dtype: str) -> list[str]:
    """The variants of `errors` (variant: `error` against eager) whose results are wrong, each with its error."""
    return [f"{v} {e:.2g}" for v, e in errors.items() if not e <= WRONG.get(dtype, 0.1)]
