"""Without a GPU, Triton still compiles: every kernel ember prints is compiled here for an H100 (sm_90) through
Triton's whole pipeline (TTIR, TTGIR, LLVM IR, PTX, cubin), which catches what the interpreter lets pass (types,
shapes and constructs the compiler rejects).

A process that imported Triton under `TRITON_INTERPRET=1` (as these tests do) cannot compile, so the compiling
runs in a fresh process: this file run as a script (`python test_gpu_compile.py`) compiles every case."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import triton
from ember_codegen_triton import TritonCodegen
from ember_lowering import lower
from ember_lowering.codegen import plan_program
from helpers import trace

POINTER = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64", "int64": "*i64",
           "int32": "*i32", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i1"}
W = torch.randn(32)
CASES = {
    "softmax_tanh": (lambda x: (torch.softmax(x, -1) * torch.tanh(x),), (torch.randn(8, 32),), "fake"),
    "layer_norm_bf16": (lambda x: (F.layer_norm(x, (32,), W.bfloat16()),), (torch.randn(8, 32).bfloat16(),), "fake"),
    "looped_symbolic": (lambda x: (x.amax(1), x.argmax(1), torch.var_mean(x, 1)[0], x.prod(1)),
                        (torch.randn(4, 50),), "symbolic"),
    "gather_checked": (lambda t, i: (F.embedding(i, t) * 2,), (torch.randn(10, 4), torch.tensor([[1, 9]])), "fake"),
    "integer_ops": (lambda a, b: (a // b, a % b, torch.fmod(a, b), (a > 0) & (b < 3)),
                    (torch.randint(-9, 9, (20,)), torch.randint(1, 5, (20,))), "fake"),
    "cross_entropy": (lambda x, y: (F.cross_entropy(x, y),), (torch.randn(6, 30), torch.randint(0, 30, (6,))), "fake"),
}


def compile_for_sm90(program, kernel, module) -> dict:
    fn = getattr(module, kernel.name)
    buffers, layout = program.layout.buffers, program.layout
    by_local = {layout.local[r]: r for r in kernel.roots}
    signature = {}
    for name in fn.arg_names:
        if name in ("XBLOCK", "RBLOCK"):
            signature[name] = "constexpr"
        elif name == "ember_err":
            signature[name] = "*i32"
        elif name in by_local:
            signature[name] = POINTER[buffers[by_local[name]].dtype]
        else:
            signature[name] = "i64"  # a symbol
    constexprs = {"XBLOCK": kernel.xblock, **({"RBLOCK": kernel.rblock} if kernel.rblock else {})}
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": kernel.warps}).asm


def compile_case(name: str, folder: Path) -> int:
    """Compile every kernel of one case for sm_90; the number of kernels."""
    fn, args, mode = CASES[name]
    codegen = TritonCodegen()
    program = plan_program(lower(trace(fn, *args, mode=mode)), codegen.print_kernel)
    assert program.kernels and not program.interpreted, name
    path = folder / f"{name}.py"
    path.write_text(codegen.unit_source(program))
    assert "from triton.language.extra import libdevice" in path.read_text()  # the GPU's, not the interpreter's
    spec = importlib.util.spec_from_file_location(f"ember_sm90_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for kernel in program.kernels:
        asm = compile_for_sm90(program, kernel, module)
        assert asm["cubin"] and kernel.name in asm["ptx"], kernel.name
    return len(program.kernels)


def test_generated_kernels_compile_to_cubin_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton"), EMBER_CACHE_DIR=str(tmp_path / "ember"))
    result = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=600, env=env,
                            cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(result.stdout.split()) == sorted(f"{name}:ok" for name in CASES), result.stdout


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        for case in CASES:
            compile_case(case, Path(folder))
            print(f"{case}:ok")
