"""One rank of the distributed tests (tests/test_distributed.py), started in its own process: trains a model
wrapped in DistributedDataParallel (or sharded with FSDP2's fully_shard) compiled with ember and an eager twin on
the same data, and reports whether they agree."""

from __future__ import annotations

import copy
import os

import torch
import torch.distributed as dist


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 512), torch.nn.Linear(512, 512)
        self.c, self.d = torch.nn.Linear(512, 512), torch.nn.Linear(512, 4)

    def forward(self, x):
        return self.d(torch.relu(self.c(torch.relu(self.b(torch.relu(self.a(x)))))))


def wrap(model: torch.nn.Module, kind: str) -> torch.nn.Module:
    if kind == "ddp":
        # 1 MB buckets: the 1 MB weights fall in several, and Dynamo splits the graph at their boundaries
        return torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    from torch.distributed.fsdp import fully_shard

    for layer in (model.a, model.b, model.c, model.d):
        fully_shard(layer)
    return fully_shard(model)


def run(rank: int, world: int, port: int, kind: str, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import ember

        torch.manual_seed(0)
        model = Net()
        twin = copy.deepcopy(model)
        model, twin = wrap(model, kind), wrap(twin, kind)
        compiled = ember.compile(model)
        opt, twin_opt = torch.optim.SGD(model.parameters(), lr=0.05), torch.optim.SGD(twin.parameters(), lr=0.05)
        with ember.record_events() as rec:
            for step in range(10):
                x = torch.randn(8, 16, generator=torch.Generator().manual_seed(100 * step + rank))
                for fn, o in ((compiled, opt), (twin, twin_opt)):
                    o.zero_grad()
                    fn(x).pow(2).mean().backward()
                    o.step()
        same = all(torch.allclose(_full(p), _full(q), atol=1e-5) for p, q in zip(model.parameters(),
                                                                               twin.parameters()))
        captured = sum(e.kind == "graph_captured" for e in rec.events)
        fallbacks = [e.message for e in rec.events if e.kind == "fallback"]
        results.put((rank, same, captured, fallbacks, ""))
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails with it
        results.put((rank, False, 0, [], f"{type(e).__name__}: {e}"))
    finally:
        dist.destroy_process_group()


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
