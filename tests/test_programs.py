"""Programs as users write them, each seen failing once (issue 11): every one runs compiled and equal to eager."""

from __future__ import annotations

import ember
import torch
import torch.nn as nn
from conftest import grads_of


class MaskedAttention(nn.Module):
    """BERT's self-attention: an additive mask built from a (batch, seq) mask that shares the input's sizes."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.qkv, self.heads, self.ln = nn.Linear(d, 3 * d), heads, nn.LayerNorm(d)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        additive = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + additive, -1)
        return self.ln((att @ v).transpose(1, 2).reshape(b, s, d) + x)


class TinyBert(nn.Module):
    def __init__(self, vocab: int = 100, d: int = 32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(64, d)
        self.layers = nn.ModuleList([MaskedAttention(d), MaskedAttention(d)])

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        x = self.tok(ids) + self.pos(pos)
        for layer in self.layers:
            x = layer(x, mask)
        return x


def test_bert_with_a_mask_at_several_batch_and_sequence_sizes(frontend):
    # at the second size Dynamo recompiles with dynamic sizes and passes one size placeholder per input that
    # carries it: two placeholders hold the same symbol
    torch.manual_seed(0)
    model = TinyBert()
    compiled = ember.compile(model, options={"frontend": frontend})
    params = list(model.parameters())
    for b, s in [(2, 8), (3, 12), (4, 16)]:
        ids, mask = torch.randint(0, 100, (b, s)), torch.ones(b, s)
        mask[:, -2:] = 0
        model.zero_grad(set_to_none=True)
        want = model(ids, mask)
        want.pow(2).mean().backward()
        eager_grads = grads_of(params)
        model.zero_grad(set_to_none=True)
        got = compiled(ids, mask)
        got.pow(2).mean().backward()
        torch.testing.assert_close(got, want)
        for e, c in zip(eager_grads, grads_of(params)):
            torch.testing.assert_close(c, e)
