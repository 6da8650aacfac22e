"""The vectorization report: how every kernel of the conformance battery and its training cases uses SIMD.

Every kernel but those of one element is explicit vector code (`PrintedKernel.simd` starts with "explicit"), some
of its ops lane by lane (gathers, integer division, argmax). Run with `-s` to see the table.
"""

from __future__ import annotations

import collections

from ember_codegen_cpp import build_program
from ember_core.testing import battery_case, battery_names
from ember_core.testing._conformance import training_case, training_names
from ember_lowering import lower


def battery_kernels() -> list[tuple[str, str, str]]:
    """(graph, kernel, simd) for every kernel of the battery and of the training cases' forward and backward."""
    graphs = [(n, battery_case(n).graph) for n in battery_names()]
    for n in training_names():
        case = training_case(n)
        graphs += [(f"{n} forward", case.partition.forward), (f"{n} backward", case.partition.backward)]
    return [(name, k.name, k.simd) for name, graph in graphs
            for k in build_program(lower(graph, emit_event=False)).kernels]


def test_every_kernel_is_explicit_vector_code_but_those_of_one_element():
    rows = battery_kernels()
    kinds = collections.Counter(simd.split(" ")[0] for _, _, simd in rows)
    print(f"\n{len(rows)} kernels: {dict(kinds)}")
    for graph, kernel, simd in rows:
        if not simd.startswith("explicit") or "lane by lane" in simd:
            print(f"  {graph:28} {kernel:36} {simd}")
    others = [(g, k, s) for g, k, s in rows if not s.startswith("explicit") and s != "scalar: one element"]
    assert not others, f"kernels not vectorized explicitly: {others}"
    assert kinds["explicit"] >= 0.9 * len(rows), kinds
