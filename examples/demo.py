"""ember's demo: compile a small transformer block for inference and training, check it against eager,
and show what the stages saw (the captured ATen graph, the events, the installed plugins)."""

from __future__ import annotations

import copy
import time

import ember
import torch
import torch.nn.functional as F
from ember_core import get_plugin_manager
from torch import nn


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def main() -> None:
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 16, 64)
    print("installed stages:")
    for impl in get_plugin_manager().registry.all():
        print(f"  {impl.stage:9} {impl.name:14} from {impl.dist} {impl.version}")

    for frontend in ("dynamo", "trace"):
        twin = copy.deepcopy(model)
        compiled = ember.compile(twin, options={"frontend": frontend})
        start = time.perf_counter()
        with ember.record_events() as rec:
            out = compiled(x)
        first = time.perf_counter() - start
        torch.testing.assert_close(out, model(x))
        out.sum().backward()
        model.zero_grad()
        model(x).sum().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
        graphs = [e.graph for e in rec.events if e.kind == "graph_captured"]
        print(f"\n[{frontend}] first call {first:.2f} s, {len(graphs)} graph(s), "
              f"{sum(len(g.nodes) for g in graphs)} ATen nodes; outputs and gradients match eager")
        if frontend == "dynamo":
            print("\n".join(str(graphs[0]).splitlines()[:14]) + "\n  ...")
    print("\nok: ember matches eager, forward and backward, with both frontends")


if __name__ == "__main__":
    main()
