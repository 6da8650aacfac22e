"""A kernel big enough to fork runs on every thread torch is told to use (`torch.set_num_threads`), and on one
thread when told one: its OpenMP loop shares torch's runtime and thread count. Measured by the CPU time each
thread of the process spends in the calls (a static schedule gives each thread its share of the work, so the
count holds on a loaded machine, where the wall time need not drop)."""

from __future__ import annotations

import os

import pytest
import torch
from ember_codegen_cpp import compiler
from helpers import compile_fn

pytestmark = [pytest.mark.skipif(compiler() is None, reason="no C++ compiler"),
              pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")]


def busy_threads(run, calls: int) -> list[int]:
    """CPU ticks each thread of this process spent in `calls` calls of `run`, those that spent any, most first."""
    def ticks() -> dict[str, int]:
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
        return out

    before = ticks()
    for _ in range(calls):
        run()
    after = ticks()
    return sorted((t - before.get(tid, 0) for tid, t in after.items() if t - before.get(tid, 0) > 2), reverse=True)


def chain(x):
    return (torch.sigmoid(x) * torch.tanh(x) + torch.exp(-x * x) * 0.5).sin().cos().relu()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_a_4m_element_kernel_runs_on_every_thread_torch_uses():
    x = torch.randn(4 << 20)
    compiled = compile_fn(chain, x)
    (out,) = compiled([x])
    torch.testing.assert_close(out, chain(x))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        compiled([x])  # the team of two starts here
        two = busy_threads(lambda: compiled([x]), calls=40)
        torch.set_num_threads(1)
        compiled([x])
        one = busy_threads(lambda: compiled([x]), calls=40)
    finally:
        torch.set_num_threads(threads)
    assert len(two) >= 2 and two[1] >= two[0] // 3, f"ticks per thread at two threads: {two}"
    assert len(one) == 1 or one[1] <= one[0] // 10, f"ticks per thread at one thread: {one}"
