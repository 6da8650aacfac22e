"""One `@triton.jit` function for kernels that differ only in their names (the shared layer's
`ember_lowering.codegen.same_kernels`).

Each printed function is a JIT function of its own, compiled on its own (Triton front end, LLVM, ptxas: the bulk of
a cold GPU build); resnet50's bottlenecks repeat within each stage, a transformer's blocks one another. The module
keeps the first of each group and binds the others' names to it (`ember_k28_... = ember_k15_...`), so the group
compiles once per specialization, and every launch site and lean launcher keeps its kernel's own name in the
wrapper. A CUDA profile shows the group under the first one's name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ember_lowering.codegen import same_kernels, with_placeholders

from ._kernel_printer import TritonKernel

_DEF = re.compile(r"def (\w+)\((.*)\):(?:  # .*)?$")


def canonical(k: TritonKernel) -> str:
    """k's text without its name, origins and parameter names: equal for kernels that compute the same thing."""
    decorator, head, *body = k.text.splitlines()
    match = _DEF.fullmatch(head)
    if match is None:  # not a printer's kernel: compare whole texts
        return k.text
    params = [p.split(":")[0].strip() for p in match.group(2).split(",")]
    text = with_placeholders("\n".join(body), params)
    kinds = [p.split(":", 1)[1].strip() if ":" in p else "" for p in match.group(2).split(",")]
    return "\n".join([decorator, repr(kinds), text])


def groups(kernels: Sequence[TritonKernel]) -> dict[str, str]:
    """Each kernel's name → the name of the first kernel with its canonical text (itself, for a first one)."""
    return same_kernels(kernels, canonical)


def module_text(kernels: Sequence[TritonKernel]) -> str:
    """The kernels' functions, each body once, then the other names bound to their group's function. (Anything with
    a `name` and a printed `text` groups the same way: matmul templates, `_gemm.GemmTemplate`, are passed too.)"""
    same = groups(kernels)
    defs = [k.text for k in kernels if same[k.name] == k.name]
    aliases = [f"{name} = {first}  # the same kernel" for name, first in same.items() if name != first]
    return "\n\n\n".join(defs) + ("\n\n\n" + "\n".join(aliases) if aliases else "")
