"""How long each buffer's Python local lives in the wrapper: to the last program step that needs it, so its
storage is freed as soon as nothing reads it (`del` after that step); to the end for what the call returns or
does not own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ember_core import Ref

from ._program import InterpretedKernel, Program, Segment


def last_uses(program: Program, constants: Mapping[str, Any]) -> dict[str, int]:
    """The last step that needs each buffer's local; absent for those `kept_to_the_end`."""
    layout, last = program.layout, {}
    for k, step in enumerate(program.steps):
        if isinstance(step, Segment):
            names = set(step.roots)
        elif isinstance(step, InterpretedKernel):
            names = {i.buffer for i in step.kernel.instrs() if i.buffer}
        else:
            names = {a.name for a in _refs((*step.args, *step.kwargs.values()))} | set(step.outs)
        for n in names | {layout.root(n) for n in names if n in layout.buffers}:
            last[n] = k
    keep = kept_to_the_end(program, constants)
    return {n: k for n, k in last.items() if n not in keep and n in layout.buffers}


def kept_to_the_end(program: Program, constants: Mapping[str, Any]) -> set[str]:
    """Constants, the outputs and the buffers they are made from, and the inputs, which are the caller's; a
    consuming wrapper's inputs (`Program.consumes`) die like any buffer: they were given to it."""
    layout = program.layout
    keep = set(constants) | (set() if program.consumes else set(program.plan.inputs))
    for o in program.plan.outputs:
        if isinstance(o, str):
            keep |= {o, layout.root(o), layout.buffers[o].base or o}
    return keep


def _refs(args: Any) -> Iterator[Ref]:
    for a in args:
        if isinstance(a, Ref):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from _refs(a)
