"""Distributed training on the CPU (gloo, two processes on this machine): a model compiled with ember, wrapped in
DistributedDataParallel (Dynamo splits its graph at DDP's bucket boundaries) or sharded with FSDP2's
`fully_shard`, trains equal to an eager twin for 10 steps (`_ddp_worker.py` is one rank)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(kind: str) -> list[tuple]:
    sys.path.insert(0, str(Path(__file__).parent))
    import _ddp_worker

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_ddp_worker.run, args=(rank, 2, port, kind, results)) for rank in range(2)]
    for p in procs:
        p.start()
    out = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return sorted(out)


def test_ddp_trains_equal_to_eager_with_the_graph_split_at_buckets():
    for rank, same, captured, fallbacks, error in _train("ddp"):
        assert not error, f"rank {rank}: {error}"
        assert same, f"rank {rank}: parameters differ from eager's after 10 steps"
        assert captured >= 2, f"rank {rank}: {captured} graphs; DDP's buckets should split the graph"
        assert not fallbacks, fallbacks


def test_fsdp2_fully_sharded_model_trains_equal_to_eager():
    pytest.importorskip("torch.distributed.fsdp", reason="no FSDP2")
    for rank, same, captured, fallbacks, error in _train("fsdp"):
        assert not error, f"rank {rank}: {error}"
        assert same, f"rank {rank}: parameters differ from eager's after 10 steps"
        assert captured >= 1 and not fallbacks, (captured, fallbacks)
