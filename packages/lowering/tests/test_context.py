"""TensorRefs: views compose as index maps; materializing gives the buffer, a view buffer or a copy."""

import torch
from ember_lowering._context import LoweringContext, view_vars
from lowering_checks import trace


def context():
    return LoweringContext(trace(lambda x: x + 1, torch.randn(4, 6)))


def test_views_compose_into_one_index_map():
    ctx = context()
    name = ctx.new_buffer((4, 6), "float32", kind="input", name="x")
    x = ctx.identity(name)
    v0, v1 = view_vars(2)
    t = x.view((6, 4), lambda v: (v[1], v[0])).view((3, 4), lambda v: (2 * v[0] + 1, v[1]))
    assert t.index == (v1, 2 * v0 + 1) and t.shape[0] == 3


def test_materialize_gives_a_view_buffer_for_strided_views_and_a_copy_otherwise():
    ctx = context()
    x = ctx.identity(ctx.new_buffer((4, 6), "float32", kind="input", name="x"))
    assert ctx.materialize(x) == "x"
    t = ctx.buffers[ctx.materialize(x.view((6, 4), lambda v: (v[1], v[0])))]
    assert t.kind == "view" and t.base == "x" and tuple(t.stride) == (1, 6)
    sq = x.view((4,), lambda v: (v[0], v[0]))  # a diagonal-like read of a 4x6: strided, stride 7
    assert ctx.buffers[ctx.materialize(sq)].stride == (7,)
    odd = x.view((24,), lambda v: (v[0] % 4, v[0] // 4))  # column-major order: not one stride
    copy = ctx.buffers[ctx.materialize(odd)]
    assert copy.kind == "temp" and len(ctx.steps) == 1
