"""Programs of the warm-start and dynamic-shape tests (tests/test_disk_cache.py, tests/test_dynamic_shapes.py).

Each program compiles a model with ember, checks every output (and gradient) against eager, and returns what
happened: how many times each event kind was sent by each stage, and, for the programs whose compile count
matters, how many graphs torch.compile makes of the same program (Dynamo with a counting backend).

`python tests/_warm_programs.py NAME...` runs the named programs in a fresh process and prints their results as
one JSON object: the warm-start tests run it twice on one `EMBER_CACHE_DIR`, a cold process then a warm one.
`--load PATH` loads a portable cache artifact first, `--save PATH` saves one after (the report of each is in the
result, under "artifact"); `--kill PID` sends SIGKILL to process PID at the first cache miss (a remote cache's
server dying in the middle of a compile).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import ember
import torch
import torch.nn.functional as F
from ember_core import get_plugin_manager, hookimpl, record_events
from torch import nn
from torch._dynamo.testing import CompileCounter

sys.path.insert(0, str(Path(__file__).parent))
from models import MLP, Block, SmallCNN  # noqa: E402

Result = dict  # {"events": {"kind/stage": count}, "torch_graphs": int | None}


def counted(events) -> dict[str, int]:
    """Events by `kind/stage`; a cache hit that came from a remote cache counts under `kind/stage/remote` too."""
    counts = Counter(f"{e.kind}/{e.stage}" for e in events)
    counts.update(f"{e.kind}/{e.stage}/remote" for e in events if (e.data or {}).get("origin", "local") != "local")
    return dict(counts)


def torch_graphs(run: Callable[[Callable], None], model: nn.Module, dynamic: bool | None = None) -> int:
    """How many graphs torch.compile captures running `run` on `model` (its own Dynamo, no backend work)."""
    counter = CompileCounter()
    torch._dynamo.reset()
    run(torch.compile(model, backend=counter, dynamic=dynamic))
    torch._dynamo.reset()
    return counter.frame_count


# ---------------------------------------------------------------------------------------------- training, inference


def train(frontend: str = "dynamo", mode: str | None = None) -> Result:
    """One forward and backward of a transformer block: outputs and every parameter's gradient equal eager's."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(2, 8, 32)
    model.zero_grad(set_to_none=True)
    model(x).pow(2).mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with record_events() as rec:
        out = ember.compile(model, mode=mode, options={"frontend": frontend})(x)
        out.pow(2).mean().backward()
    torch.testing.assert_close(out, model(x))
    for p, g in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, g)
    return {"events": counted(rec.events), "torch_graphs": None}


def train_tuned() -> Result:
    """The training step under mode="max-autotune": kernel variants measured cold, their choices reused warm."""
    return train(mode="max-autotune")


def inference(frontend: str = "dynamo") -> Result:
    torch.manual_seed(0)
    model, x = SmallCNN().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad(), record_events() as rec:
        out = ember.compile(model, options={"frontend": frontend})(x)
        torch.testing.assert_close(out, model(x))
    return {"events": counted(rec.events), "torch_graphs": None}


# ---------------------------------------------------------------------------------------------- dynamic shapes


class Decoder(nn.Module):
    """One attention layer of a decoder with a KV cache: the new token's keys and values are appended to it."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, k_cache, v_cache):
        q, k, v = self.qkv(x).chunk(3, -1)
        k, v = torch.cat([k_cache, k], 1), torch.cat([v_cache, v], 1)
        return self.proj(F.scaled_dot_product_attention(q, k, v)), k, v


def decode_loop(step: Callable, model: Decoder, steps: int = 6) -> list[torch.Tensor]:
    """A 4-token prefill fills the cache; then each step feeds the last output back with a cache one longer."""
    torch.manual_seed(1)
    with torch.no_grad():
        k, v = (t.contiguous() for t in model.qkv(torch.randn(1, 4, 16)).chunk(3, -1)[1:])
        x, outs = torch.randn(1, 1, 16), []
        for _ in range(steps):
            x, k, v = step(x, k, v)
            outs.append(x)
    return outs


def decode(frontend: str = "dynamo", dynamic: bool | None = None) -> Result:
    """Automatic dynamic shapes: the prefill's cache length is specialized, the second length makes it dynamic
    (two graphs); `dynamic=True`: one graph from the start. Every step's output equals eager's."""
    torch.manual_seed(0)
    model = Decoder().eval()
    with record_events() as rec:
        got = decode_loop(ember.compile(model, dynamic=dynamic, options={"frontend": frontend}), model)
    for g, e in zip(got, decode_loop(model, model)):
        torch.testing.assert_close(g, e)
    return {"events": counted(rec.events), "torch_graphs": torch_graphs(lambda f: decode_loop(f, model), model,
                                                                         dynamic)}


def decode_dynamic(frontend: str = "dynamo") -> Result:
    return decode(frontend, dynamic=True)


def sweep_batches(fn: Callable, sizes=range(1, 65)) -> list[torch.Tensor]:
    torch.manual_seed(2)
    with torch.no_grad():
        return [fn(torch.randn(b, 16)) for b in sizes]


def sweep(frontend: str = "dynamo") -> Result:
    """Batch sizes 1..64: size 1 is specialized, size 2 makes the batch dynamic, one graph serves the rest."""
    torch.manual_seed(0)
    model = MLP().eval()
    with record_events() as rec:
        got = sweep_batches(ember.compile(model, options={"frontend": frontend}))
    for g, e in zip(got, sweep_batches(model)):
        torch.testing.assert_close(g, e)
    return {"events": counted(rec.events), "torch_graphs": torch_graphs(sweep_batches, model)}


PROGRAMS: dict[str, Callable[..., Result]] = {
    "train": train, "train_tuned": train_tuned, "inference": inference, "decode": decode,
    "decode_dynamic": decode_dynamic, "sweep": sweep,
}


class KillAtFirstMiss:
    """An event hook that kills process `pid` at the first cache miss of this process."""

    def __init__(self, pid: int):
        self.pid = pid

    @hookimpl
    def ember_event(self, event) -> None:
        if self.pid and event.kind in ("disk_cache_miss", "build_cache_miss"):
            os.kill(self.pid, signal.SIGKILL)
            self.pid = 0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="+", choices=list(PROGRAMS))
    parser.add_argument("--load")
    parser.add_argument("--save")
    parser.add_argument("--kill", type=int)
    args = parser.parse_args(argv)
    results: dict = {}
    if args.load:
        report = ember.cache.load(args.load)
        results["artifact"] = {"entries": report.entries, "skipped": report.skipped}
    if args.kill:
        get_plugin_manager().pm.register(KillAtFirstMiss(args.kill))
    for name in args.names:
        torch._dynamo.reset()
        results[name] = PROGRAMS[name]()
    if args.save:
        report = ember.cache.save(args.save)
        results["artifact"] = {"entries": report.entries, "skipped": report.skipped}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
