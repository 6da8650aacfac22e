"""How far ember's own kernels can move a zoo model's inference: the time spent in extern calls (GEMMs, attention,
convolutions, pooling, embedding lookups) that ember and Inductor both hand to ATen, oneDNN or MKL.

For eager, ember and Inductor on one model: the median time per call, and the self time of the extern ops in the
torch profiler per call. `bound` is Inductor's time over ember's extern time alone: Inductor / ember if ember's own
kernels and wrapper cost nothing. Where it is near the issue's target, the target needs faster externs, not faster
generated code.

Usage: python benchmarks/extern_bound.py [--models vit_tiny_patch16_224,bert] [--threads 1]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import ember
import torch
import zoo
from torch.profiler import profile

EXTERN = re.compile(r"^(aten::(addmm|mm|bmm|baddbmm|matmul|linear|mkldnn_convolution|_slow_conv2d_forward|"
                    r"convolution|_convolution|conv2d|_scaled_dot_product.*|max_pool2d.*|_?adaptive_avg_pool2d|"
                    r"embedding|index_select|copy_)|mkldnn::.*|aten::_mkl.*)$")


def per_call(fn, args, kwargs, calls: int = 20) -> tuple[float, float]:
    """Median seconds per call, and the extern ops' self seconds per call."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    with profile() as prof:
        for _ in range(calls):
            fn(*args, **kwargs)
    extern = sum(e.self_cpu_time_total for e in prof.key_averages() if EXTERN.match(e.key)) / calls / 1e6
    return statistics.median(times), extern


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="vit_tiny_patch16_224,bert,gelu_mlp,attention_block")
    parser.add_argument("--threads", type=int, default=1)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    print("| model | eager ms | inductor ms | ember ms | ember's externs ms | share | bound |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in a.models.split(","):
        model, args, kwargs = zoo.BY_NAME[name].build()
        if isinstance(model, torch.nn.Module):
            model.eval().requires_grad_(False)
        with torch.no_grad():
            fns = {"eager": model, "inductor": torch.compile(model), "ember": ember.compile(model)}
            for fn in fns.values():
                for _ in range(3):
                    fn(*args, **kwargs)
            got = {k: per_call(fn, args, kwargs) for k, fn in fns.items()}
        (eager, _), (inductor, _), (mine, extern) = got["eager"], got["inductor"], got["ember"]
        print(f"| {name} | {eager * 1e3:.2f} | {inductor * 1e3:.2f} | {mine * 1e3:.2f} | {extern * 1e3:.2f} | "
              f"{extern / mine:.0%} | {inductor / extern:.2f} |", flush=True)


if __name__ == "__main__":
    main()
