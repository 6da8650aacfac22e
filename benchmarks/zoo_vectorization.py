"""The vectorization report of the model zoo: how each of ember's C++ kernels uses SIMD, for every zoo model's
inference and training step, as codegen-cpp's `kernels_generated` events say (`PrintedKernel.simd`).

Counts the kernels by kind (explicit vectors; scalar, with the reason) and lists every kernel that is not
explicit vectors, and the ops inside vector kernels that run lane by lane. The conformance battery's report is
`packages/codegen-cpp/tests/test_vectorization.py` (`pytest -s` prints it); this one needs timm and transformers.

Usage: python benchmarks/zoo_vectorization.py [--models a,b] [--threads 2]
"""

from __future__ import annotations

import argparse
import collections

import _harness

_harness.use_fresh_caches("ember-zoo-simd-")

import ember  # noqa: E402
import torch  # noqa: E402
import zoo  # noqa: E402


def kernels_of(name: str, training: bool) -> dict[str, str]:
    """Kernel name -> its SIMD description, for one model's first step (fresh compile)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    made = zoo.variants(zoo.BY_NAME[name], training)
    with ember.record_events() as rec, torch.enable_grad() if training else torch.no_grad():
        made["ember"].step()
    return {k: v for e in rec.kinds("kernels_generated") for k, v in (e.data.get("simd") or {}).items()}


def kind(simd: str) -> str:
    return "explicit" if simd.startswith("explicit") else simd.split(":")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(zoo.BY_NAME))
    parser.add_argument("--threads", type=int, default=2)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    total: collections.Counter = collections.Counter()
    lane_by_lane: collections.Counter = collections.Counter()
    others = []
    for name in a.models.split(","):
        for training in (False, True):
            kernels = kernels_of(name, training)
            counts = collections.Counter(kind(s) for s in kernels.values())
            total.update(counts)
            step = "training" if training else "inference"
            print(f"{name:24} {step:9} {len(kernels):4} kernels: {dict(counts)}", flush=True)
            for k, s in kernels.items():
                if kind(s) != "explicit":
                    others.append(f"  {name} {step} {k}: {s}")
                elif "lane by lane:" in s:
                    lane_by_lane.update(op.strip() for op in s.split("lane by lane:")[1].split(","))
    print(f"\nall: {sum(total.values())} kernels: {dict(total)}")
    print(f"ops run lane by lane inside vector kernels (kernels): {dict(lane_by_lane)}")
    print("not explicit vectors:" if others else "every kernel is explicit vectors")
    print("\n".join(others))


if __name__ == "__main__":
    main()
