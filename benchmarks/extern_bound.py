"""How far ember's own kernels can move a zoo model's inference: the time spent in extern calls (GEMMs, attention,
convolutions, pooling, embedding lookups) that ember and Inductor both hand to ATen, oneDNN or MKL.

For eager, ember and Inductor on one model: the median time per call (taking turns in every repeat,
`_harness.timed`), and the self time of ember's extern ops per call in the torch profiler. `bound` is Inductor's
time over ember's extern time alone: Inductor / ember if ember's own kernels and wrapper cost nothing. Where it is
near the issue's target, the target needs faster externs, not faster generated code.

Usage: python benchmarks/extern_bound.py [--models vit_tiny_patch16_224,bert] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import re

import ember
import torch
import zoo
from _harness import timed
from torch.profiler import profile

EXTERN = re.compile(r"^(aten::(addmm|mm|bmm|baddbmm|matmul|linear|mkldnn_convolution|_slow_conv2d_forward|"
                    r"convolution|_convolution|conv2d|_scaled_dot_product.*|max_pool2d.*|_?adaptive_avg_pool2d|"
                    r"embedding|index_select|copy_)|mkldnn::.*|aten::_mkl.*)$")


def extern_s(fn, args, kwargs, calls: int = 20) -> float:
    """The extern ops' self seconds per call, from the torch profiler."""
    with profile() as prof:
        for _ in range(calls):
            fn(*args, **kwargs)
    return sum(e.self_cpu_time_total for e in prof.key_averages() if EXTERN.match(e.key)) / calls / 1e6


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
            times = timed({k: functools.partial(fn, *args, **kwargs) for k, fn in fns.items()}, (), repeats=7)
            extern = extern_s(fns["ember"], args, kwargs)
        eager, inductor, mine = times["eager"], times["inductor"], times["ember"]
        print(f"| {name} | {eager * 1e3:.2f} | {inductor * 1e3:.2f} | {mine * 1e3:.2f} | {extern * 1e3:.2f} | "
              f"{extern / mine:.0%} | {inductor / extern:.2f} |", flush=True)


if __name__ == "__main__":
    main()
