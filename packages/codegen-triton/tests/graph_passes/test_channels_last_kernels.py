"""ember-lowering's pass `channels-last` on a CUDA graph, then this codegen: its kernels over NHWC values (run by
Triton's interpreter on the CPU) give eager's outputs in their layouts. The pass itself is tested in ember-lowering."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from ember_core import record_events, verify
from ember_lowering.graph_passes import ChannelsLast
from helpers import CODEGEN, on_cuda, on_device, trace


def small_cnn(x, w1, w2, scale, wl):
    y = F.relu(F.conv2d(x, w1, padding=1) * scale[None, :, None, None])
    y = F.max_pool2d(F.conv2d(y, w2, padding=1) + y, 2)
    return (F.linear(y.flatten(1), wl), y)


def test_the_nhwc_graphs_kernels_match_eager_in_tritons_interpreter():
    args = (torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6, 6, 3, 3), torch.randn(6),
            torch.randn(5, 6 * 4 * 4))
    after = ChannelsLast(decide=lambda convs: True).run(on_cuda(trace(small_cnn, *args)))
    verify(after)
    assert "memory_format=torch.channels_last" in str(after)
    with record_events() as rec:
        compiled = CODEGEN.compile(on_device(after, "cpu"), list(args), {})
        got = compiled([a.clone() for a in args])
    assert not rec.kinds("fallback"), [e.data["reason"] for e in rec.kinds("fallback")]
    for g, w in zip(got, small_cnn(*args)):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
