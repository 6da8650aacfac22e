"""`VectorBody` (`_vector.py`): the vector step of a pointwise kernel, lane by lane where an op has no vector form."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_cpp import compiler
from helpers import check

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")


def test_a_lane_by_lane_group_reads_each_operand_once():
    """A value that a lane-by-lane group reads twice (`a // a`: one integer division of t0 by t0) is declared once
    per lane: it was declared per read, `redeclaration of 'const int64_t t0'`, and the graph ran in the interpreter
    codegen after a failed build (`check` fails on any fallback; the conftest on the build failure)."""
    a = torch.arange(1, 40, dtype=torch.int64)
    check(lambda a: torch.div(a, a, rounding_mode="floor"), a)


def test_a_gather_whose_index_reads_a_value_twice_builds():
    """`take`'s gather: its address reads the index value twice (the index, and whether it is negative); the lanes
    of the index vector are read once (OpInfo `take`, sample 0, failed to build)."""
    x, index = torch.randn(3, 3), torch.tensor([0, -1, 7, 2, -9, 4, 8, 1, 3, 5, -2, 6] * 3)
    check(torch.take, x, index)


def test_a_gathers_lanes_are_scalar_loads_from_its_rows_address():
    """F.interpolate's gather `x[i0, t2, t3]` (t2 the output row's input row, the same in every lane): gcc made the
    lanes one vector gather over whole addresses, 1.7x slower on Zen 5 than scalar loads. The row's value is a
    scalar of the step (`_uniform`), read by the lanes as it is, and the lanes are an unrolled loop, not `omp
    simd`; the same values, and a gather whose index may be out of range still raises."""
    import re

    import torch.nn.functional as F

    compiled = check(lambda x: F.interpolate(x, scale_factor=0.5, mode="nearest-exact") * 2, torch.randn(2, 3, 10, 40))
    lanes = re.findall(r"#pragma (omp simd|GCC unroll \d+)\n\s*for \(int64_t ember_l = 0;.*?\n(.*?)\n\s*\}\n",
                       compiled.source, re.S)
    assert lanes and all(pragma.startswith("GCC unroll") for pragma, _ in lanes), lanes
    # the row index (loaded at the output row) is read as the step's scalar, not from a vector's lane
    (body,) = [body for _, body in lanes]
    reads = re.findall(r"const int64_t (t\d+) = \1_v\[ember_l\];", body)
    assert len(reads) == 1, body  # the column's index only
    table, index = torch.randn(10, 4), torch.tensor([1, 9, 0, 3] * 5)
    gather = check(lambda t, i: (t[i] * 2,), table, index)
    with pytest.raises(IndexError):
        gather([table, torch.tensor([1, 12] * 10)])


def test_an_embeddings_row_is_the_steps_scalar_and_its_lanes_stay_simd():
    """An embedding's row index is loaded at the token (the same in every lane of a step): read as the step's
    scalar, the lanes address consecutive elements, which `omp simd` loads as one vector (a lookup of 2x128
    tokens of 256 floats: 122 us -> 44 us at 2 threads); the row is still tested against the table."""
    import re

    table, ids = torch.randn(100, 64), torch.randint(0, 100, (4, 8))
    compiled = check(lambda t, i: (torch.nn.functional.embedding(i, t) * 2,), table, ids)
    (pragma, body) = re.findall(r"#pragma (omp simd[^\n]*|GCC unroll \d+)\n\s*for \(int64_t ember_l = 0;.*?\n(.*?)"
                                r"\n\s*\}\n", compiled.source, re.S)[0]
    assert pragma.startswith("omp simd") and "_v[ember_l];" not in body, (pragma, body)
    with pytest.raises(IndexError):
        compiled([table, torch.full((4, 8), 100)])
