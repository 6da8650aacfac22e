"""cat-slice-scatters, a graph pass at `pre_lowering` (an identity): a sum of `slice_scatter(zeros, piece, d, start,
end)` whose pieces tile dimension d exactly is `cat(pieces, d)`.

Autograd writes the gradient of a tensor read one slice at a time (an RNN's input projection, computed for every
time step at once and read step by step) as one scatter of each slice's gradient into zeros, added up. Lowered as
written, every element of the sum tests every piece (32 masked loads and selects at each element of a GRU's
32-step gradient: two kernels took 45% of its training step); as a cat of many pieces it is one copy of each
(`_rules_index._cat` leaves a cat of more than `MAX_CAT_PIECES` pieces to ATen). Adding the zeros changes nothing
but the sign of a zero (-0.0 + 0.0 is +0.0).
"""

from __future__ import annotations

import logging

from ember_core import Graph, Node, Ref, contiguous_stride

from ._fills import is_zero_fill
from ._sums import Rewrite, Sum, Uses, rewrite_sums

log = logging.getLogger("ember.kernels")


class CatSliceScatters:
    id = "cat-slice-scatters"

    def run(self, graph: Graph) -> Graph:
        return cat_slice_scatters(graph)


def cat_slice_scatters(graph: Graph) -> Graph:
    """The graph with each such sum (a tree of adds, each but the last read by the next alone) made one `cat`."""
    return rewrite_sums(graph, _as_cat)


def _as_cat(graph: Graph, s: Sum, uses: Uses) -> Rewrite | None:
    """`cat(pieces, d)` in place of the sum, if its terms are slice_scatters (each read once) into zeros of its own
    shape and dtype, along one dim, with step 1, and their slices tile that dim from 0 to its end in order."""
    node = s.top
    out = graph.values.get(node.outputs[0])
    if out is None or not out.shape or not all(isinstance(d, int) for d in out.shape):
        return None  # symbolic sizes: left as written
    if tuple(out.stride) != tuple(contiguous_stride(out.shape)):
        return None
    leaves = [uses.once(t) for t in s.terms]
    if not all(leaf is not None and leaf.op == "aten.slice_scatter.default" for leaf in leaves):
        return None
    rank, spans, dims, fills = len(out.shape), [], set(), []
    for leaf in leaves:
        args = list(leaf.args) + [None] * (6 - len(leaf.args))
        base, piece, d, start, end, step = (leaf.kwargs.get(k, a) for k, a in
                                            zip(("self", "src", "dim", "start", "end", "step"), args))
        d, start, step = (0 if d is None else d), (0 if start is None else start), (1 if step is None else step)
        fill = uses.once(base)
        if not (isinstance(piece, Ref) and isinstance(d, int)) or not is_zero_fill(fill):
            return None
        fills.append(fill)
        d %= rank
        size = out.shape[d]
        end = size if end is None else end
        v, p = graph.values.get(leaf.outputs[0]), graph.values.get(piece.name)
        if not all(isinstance(x, int) for x in (size, start, end, step)) or step != 1 or v is None or p is None:
            return None
        if v.shape != out.shape or v.dtype != out.dtype or p.dtype != out.dtype or len(p.shape) != rank:
            return None
        start, end = max(0, start + size if start < 0 else start), min(size, end + size if end < 0 else end)
        expected = tuple(end - start if j == d else n for j, n in enumerate(out.shape))
        if tuple(p.shape) != expected:
            return None
        spans.append((start, end, piece))
        dims.add(d)
    if len(dims) != 1:
        return None
    d = dims.pop()
    spans.sort(key=lambda span: span[0])
    at = 0
    for start, end, _ in spans:
        if start != at or end <= start:
            return None
        at = end
    if at != out.shape[d]:
        return None
    log.debug("cat %s: a sum of %d slice scatters into zeros", node.outputs[0], len(leaves))
    cat = Node(node.outputs, "aten.cat.default", (tuple(p for _, _, p in spans), d), {}, node.meta)
    return Rewrite([cat], drop=[*leaves, *fills])
