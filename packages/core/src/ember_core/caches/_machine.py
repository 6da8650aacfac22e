"""What a cache entry built on one machine depends on, so that another machine uses it only where it is the same.

A local cache never leaves its machine, so its keys name only what changes between builds there (the source, the
flags). An entry that travels (a shared remote cache, a portable artifact) also carries the facts of the machine and
software that built it, and is used only where they match:
- always: the Python (major.minor), the processor architecture, the versions of torch and Triton, and
  ember-core's code version (its release and a digest of its sources);
- `cpu`, for what the CPU decides (a library built with -march=native, a tuning choice timed on it): the CPU's model
  name and feature flags, hashed;
- `gpu`, for what the GPU decides (a Triton binary, a choice timed on it): each CUDA device's name and compute
  capability.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, version

import torch

from ._code_version import code_version

MACHINE_PARTS = ("cpu", "gpu")  # what a cache may say its entries depend on, beyond the software's versions


@cache
def cpu_lines() -> str:
    """The first CPU's model name and feature flags from /proc/cpuinfo ("" where there is none)."""
    text = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    text += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    return text


@cache
def cpu_tag() -> str:
    """What -march=native depends on: the CPU's architecture, model and feature flags, hashed (16 hex digits)."""
    return hashlib.sha256((platform.machine() + cpu_lines()).encode()).hexdigest()[:16]


@cache
def gpu_tag() -> str:
    """Each CUDA device's name and compute capability (`NVIDIA H200 9.0`), `;`-separated; "none" without CUDA."""
    if not torch.cuda.is_available():
        return "none"
    names = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        names.append(f"{torch.cuda.get_device_name(i)} {major}.{minor}")
    return ";".join(names)


def _dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


@cache
def software_facts() -> tuple[tuple[str, str], ...]:
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return (("python", python), ("arch", platform.machine()), ("torch", torch.__version__),
            ("triton", _dist_version("triton")), ("ember_core", code_version("ember_core")))


def machine_facts(parts: tuple[str, ...] = ()) -> dict[str, str]:
    """The facts an entry that depends on `parts` (some of `MACHINE_PARTS`) carries: name → value."""
    unknown = set(parts) - set(MACHINE_PARTS)
    if unknown:
        raise ValueError(f"unknown machine parts {sorted(unknown)}; known: {list(MACHINE_PARTS)}")
    facts = dict(software_facts())
    if "cpu" in parts:
        facts["cpu"] = cpu_tag()
    if "gpu" in parts:
        facts["gpu"] = gpu_tag()
    return facts
