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
