"""Page faults of compiled CPU calls under glibc's own malloc thresholds, as a user's process has them.

The other benchmarks fix glibc's thresholds for every variant (`_harness.child_env`), so that what one variant freed
does not decide whether the next one faults. A user's process has glibc's defaults, which rise only as the process
frees large chunks; ember sets them to their ceiling at its first CPU graph (codegen-cpp's `cpp.malloc`). This
measures what that is worth: each of zoo.py's models (inference or a training step) in fresh processes, one per
variant, none with `MALLOC_*_` variables: Inductor, ember with `cpp.malloc="system"` (glibc left alone) and ember as
shipped. Per call: median wall milliseconds, minor page faults and system CPU milliseconds (all threads), medians
over processes. Variants run in separate processes, so their times carry the machine's noise between processes.

Usage: python benchmarks/cpu_malloc.py [--models vit_tiny_patch16_224,convnext_atto] [--modes inference,training]
                                       [--processes 3] [--repeats 30] [--threads 2] [--write]
Needs timm and transformers (benchmarks/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import _harness

HERE = Path(__file__).resolve().parent
VARIANTS = ("inductor", "ember-system", "ember")
HEADING = "Page faults under glibc's own malloc thresholds"


def child(name: str, mode: str, variant: str, threads: int, repeats: int) -> dict:
    """One variant's numbers, in this (fresh) process."""
    _harness.use_fresh_caches("ember-malloc-")
    import ember
    import torch
    import zoo
    from ember_codegen_cpp import malloc_tuning

    torch.set_num_threads(threads)
    training = mode == "training"
    fn, args, kwargs = zoo.BY_NAME[name].build()
    if isinstance(fn, torch.nn.Module):
        fn.train(training)
        fn.requires_grad_(training)
        leaves = list(fn.parameters()) if training else []
    else:
        args = tuple(a.requires_grad_() if training and a.is_floating_point() else a for a in args)
        leaves = [a for a in args if a.requires_grad]
    if variant == "inductor":
        compiled = torch.compile(fn, backend="inductor")
    else:
        compiled = ember.compile(fn, options={"cpp.malloc": "system"} if variant == "ember-system" else {})

    def step() -> None:
        if not training:
            with torch.no_grad():
                compiled(*args, **kwargs)
            return
        for t in leaves:
            t.grad = None
        zoo.main_tensor(compiled(*args, **kwargs)).pow(2).mean().backward()

    for _ in range(3):
        step()
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"ms": statistics.median(times) * 1e3, "faults": (after.ru_minflt - before.ru_minflt) / repeats,
            "sys_ms": (after.ru_stime - before.ru_stime) / repeats * 1e3, "malloc": malloc_tuning()}


def run(name: str, mode: str, variant: str, threads: int, repeats: int) -> dict:
    """`child` in a fresh process with glibc's defaults (no `MALLOC_*_` variables, unlike `_harness.child_env`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    return _harness.run_child(__file__, [name, mode, variant, str(threads), str(repeats)], 1800, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="vit_tiny_patch16_224,convnext_atto")
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write", action="store_true", help=f"put the table in benchmarks/README.md, '{HEADING}'")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.child:
        name, mode, variant, threads, repeats = a.child
        print(json.dumps(child(name, mode, variant, int(threads), int(repeats))))
        return
    rows = ["| model | step | " + " | ".join(f"{v} ms | faults | sys ms" for v in VARIANTS) + " |",
            "|---|---|" + "---:|---:|---:|" * len(VARIANTS)]
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            got: dict[str, list[dict]] = {v: [] for v in VARIANTS}
            for p in range(a.processes):
                for v in VARIANTS[p % len(VARIANTS):] + VARIANTS[:p % len(VARIANTS)]:  # the order turns
                    got[v].append(run(name, mode, v, a.threads, a.repeats))
                    if v == "ember" and not str(got[v][-1]["malloc"]).startswith("set"):
                        raise SystemExit(f"ember did not set the thresholds here: {got[v][-1]['malloc']}")
            cells = []
            for v in VARIANTS:
                med = {k: statistics.median(r[k] for r in got[v]) for k in ("ms", "faults", "sys_ms")}
                cells.append(f"{med['ms']:.2f} | {med['faults']:.0f} | {med['sys_ms']:.2f}")
            rows.append(f"| {name} | {mode} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    command = "python benchmarks/cpu_malloc.py " + " ".join(sys.argv[1:])
    body = (f"`{command}` ({a.threads} threads, {a.processes} processes per variant, medians of {a.repeats} calls; "
            "faults and system time per call, all threads):\n\n" + "\n".join(rows) + "\n")
    print(body)
    if a.write:
        _harness.write_section(HERE / "README.md", f"## {HEADING} on {_harness.machine()}", body)


if __name__ == "__main__":
    main()
