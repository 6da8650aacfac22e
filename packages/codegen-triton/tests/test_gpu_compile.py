"""Without a GPU, Triton still compiles: the codegen's own GPU build (`_precompile.py`: every kernel of a program
compiled in parallel before the module is stored) runs here against a stand-in Triton driver that reports an H100
(sm_90), through Triton's whole pipeline (TTIR, TTGIR, LLVM IR, PTX, cubin). That catches what the interpreter
lets pass (types, shapes and constructs the compiler rejects), and shows the build's failure path for real: a
kernel Triton rejects sends its graph to the interpreter codegen with the compiler's message. The driver's launcher
records launches (`ember_codegen_triton.testing.StandInGPU`): the lean launchers' calls are checked against Triton's
own launch path, argument by argument.

A process that imported Triton under `TRITON_INTERPRET=1` (as the other tests do) cannot compile, so the work runs
in a fresh process: this file run as a script (`python test_gpu_compile.py`) prints one `name:ok` per check."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import on_cuda, trace

W = torch.randn(32)


def _states(x, w):
    """A recurrence's states concatenated: lowering's cat-in-place has each state's kernel write into the cat's buffer
    at its offset (the input, the first piece, copied by a kernel of its own)."""
    h, out = x, [x]
    for _ in range(10):
        h = torch.tanh(h @ w) + h
        out.append(h)
    return (torch.cat(out) * 2,)


CASES = {
    "softmax_tanh": (lambda x: (torch.softmax(x, -1) * torch.tanh(x),), (torch.randn(8, 32),), "fake"),
    "layer_norm_bf16": (lambda x: (F.layer_norm(x, (32,), W.bfloat16()),), (torch.randn(8, 32).bfloat16(),), "fake"),
    "looped_symbolic": (lambda x: (x.amax(1), x.argmax(1), torch.var_mean(x, 1)[0], x.prod(1)),
                        (torch.randn(4, 50),), "symbolic"),
    # argmax/argmin lanes of a looped row in the values' own dtype (int64, float64): the interpreter ran them when
    # they were float32 and gave a wrong index; compiled for sm_90 they must also pass Triton's loop-carried types
    "looped_wide_argmax": (lambda a, b: (a.argmax(1), a.argmin(1), b.argmax(1)),
                           (torch.randint(-2 ** 40, 2 ** 40, (4, 5000)), torch.randn(4, 5000, dtype=torch.float64)),
                           "fake"),
    "gather_checked": (lambda t, i: (F.embedding(i, t) * 2,), (torch.randn(10, 4), torch.tensor([[1, 9]])), "fake"),
    # ops Triton prints through their defaults (float floor division and remainder as torch rounds them, trunc
    # division, sign, copysign, integer pow by squaring): composed code the interpreter runs, compiled for real
    "composed_ops": (lambda a, b, n, e: (a // b, torch.remainder(a, b), torch.div(a, b, rounding_mode="trunc"),
                                         torch.sign(a), torch.copysign(a, b), n ** e),
                     (torch.randn(40), torch.randn(40) + 3, torch.randint(-5, 5, (40,), dtype=torch.int32),
                      torch.randint(0, 6, (40,), dtype=torch.int32)), "fake"),
    "integer_ops": (lambda a, b: (a // b, a % b, torch.fmod(a, b), (a > 0) & (b < 3)),
                    (torch.randint(-9, 9, (20,)), torch.randint(1, 5, (20,))), "fake"),
    "cross_entropy": (lambda x, y: (F.cross_entropy(x, y),), (torch.randn(6, 30), torch.randint(0, 30, (6,))), "fake"),
    # cross-entropy's gradient: a scatter with one index per row, a select whose index is checked on the device
    "scatter_select": (lambda x, i, g: (torch.zeros_like(x).scatter_add(1, i, g) - torch.softmax(x, -1),),
                       (torch.randn(6, 30), torch.randint(0, 30, (6, 1)), torch.randn(6, 1)), "fake"),
    # ops ember-core keeps whole for eager's gradients, lowered by their own rules, in bfloat16 (computed in
    # float32, one rounding at the store); and an argmax read back as an index after its loop in the same kernel
    "kept_whole_bf16": (lambda x, y: (torch.xlogy(x, y) + F.celu(x) + torch.sinc(x) + torch.special.entr(y),
                                      torch.logit(y, eps=0.01) * F.hardswish(x) + F.mish(x) + F.softplus(x)
                                      + torch.special.xlog1py(x, 0.5) + F.softshrink(x)),
                        (torch.randn(8, 32).bfloat16(), torch.rand(8, 32).bfloat16()), "fake"),
    # max pooling of an NCHW tensor as ember-lowering's unrolled taps (no ATen call: without the rule no kernel is
    # printed and the case fails), the static sizes read as index values: on the lowest Triton a constant index
    # printed as a broadcast constexpr did not compile; values in bfloat16, indices int64 for the backward's call
    "max_pool_bf16": (lambda x: torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1], [2, 1]),
                      (torch.randn(2, 3, 11, 9).bfloat16(),), "fake"),
    "index_after_reduction": (lambda x: (torch.zeros(x.shape, dtype=torch.bool).scatter(1, x.argmax(1, True), True),
                                         x.gather(1, x.argmax(1, True)) * 2), (torch.randn(6, 40),), "fake"),
    # a row's moments in float64: the corrected two-pass clamp must keep the values' dtype
    "moments_float64": (lambda x: torch.var_mean(x, 1), (torch.randn(4, 40, dtype=torch.float64),), "fake"),
    "column_sums": (lambda g, x: ((g * g).sum(0), torch.var_mean(x, (0, 2, 3))),
                    (torch.randn(300, 70), torch.randn(2, 6, 10, 10).to(memory_format=torch.channels_last)), "fake"),
    "split_batch_norm": (lambda x: (F.batch_norm(x, None, None, W[:4], W[4:8], training=True), x.sum()),
                         (torch.randn(8, 4, 32, 32),), "fake"),
    # a bias gradient's sum over a (24, 16) view of the (4, 6, 16) values it is fused with (fuse-vertical splits the
    # reduction's rows to 4 x 6: `_rewrite.refine`)
    "sum_over_a_merging_view": (lambda g: (lambda y: (y, y.view(-1, 16).sum(0)))(F.gelu(g) * g),
                                (torch.randn(4, 6, 16),), "fake"),
    # sizes of a fractional scale, `TruncToInt(0.7*ToFloat(s2))`: float64 constants and casts of size arguments
    "fractional_scale_sizes": (lambda x: (F.interpolate(x, scale_factor=(0.7, 1.7), mode="nearest"),
                                          x[:, :, :math.floor(x.shape[2] * 0.3)] * 2,
                                          x[:, :, :math.ceil(x.shape[2] * 0.3)] * 3,
                                          x[:, :, :math.ceil(x.shape[2] / 2)] * 4),  # a double division
                               (torch.randn(2, 3, 100, 10),), "symbolic"),
    # static resizes: every gather's index is computed from an arange and proven inside the input (lowering's
    # bound-indices), so the kernels load without a test, an error flag or a device assert
    "resizes_in_bounds": (lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                                     F.interpolate(x, scale_factor=2, mode="bilinear") * 2,
                                     F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=False) + 1),
                          (torch.randn(2, 3, 9, 13),), "fake"),
    # three layers of one body between bf16 matmuls (extern calls): one @triton.jit function and two names bound to
    # it (`_dedup.py`, the shared `same_kernels`), each launch site lean through its own name
    "cat_in_place": (_states, (torch.randn(4, 16), torch.randn(16, 16)), "fake"),
    "repeated_layers_bf16": (lambda x, w: (torch.softmax(torch.tanh(torch.softmax(torch.tanh(torch.softmax(
        torch.tanh(x @ w) * 2, -1) @ w) * 2, -1) @ w) * 2, -1),),
        (torch.randn(8, 32).bfloat16(), torch.randn(32, 32).bfloat16()), "fake"),
}
CHECKS = [*CASES, "gather_asserts_on_cuda", "compile_error_falls_back",
          *(f"lean_launch_{name}" for name in CASES),
          *(f"lean_launch_training_{name}" for name in ("attention", "causal_attention", "norms", "losses", "softmax",
                                                        "multi_output")),
          "lean_launch_odd_offset", "tuned_launches_go_lean",
          "gemm_templates", "graph_passes_bf16", "host_number_on_cuda",
          "compile_workers_fill_the_cache",
          "private_triton_cache", "warm_bind_skips_the_jit", "warm_bind_restores_missing_binaries"]


def test_the_gpu_build_compiles_every_kernel_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    env.update(EMBER_CACHE_DIR=str(tmp_path / "ember"))
    result = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=600, env=env,
                            cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split() == [f"{name}:ok" for name in CHECKS], result.stdout + result.stderr[-4000:]


# ---------------------------------------------------------------------------------------------- the script


def main() -> None:
    import triton
    from ember_codegen_triton import TritonCodegen
    from ember_codegen_triton.testing import StandInGPU
    from ember_core import record_events
    from ember_lowering.codegen import PrintedKernel
    from triton.runtime.driver import driver

    class OnSm90(TritonCodegen):
        """Also serves CPU graphs (without the interpreter), compiled for the stand-in GPU: a graph whose build
        fails can then run on the CPU here."""

        def serves(self, device: str) -> bool:
            return True

    class Rejected(OnSm90):
        """Its kernels fail Triton's compile-time checks (the interpreter would not run them either)."""

        def print_kernel(self, kernel, layout, name) -> PrintedKernel:
            printed = super().print_kernel(kernel, layout, name)
            lines = printed.text.splitlines()  # @triton.jit, the def line, the body
            lines.insert(2, '    tl.static_assert(XBLOCK < 0, "ember test: rejected")')
            return dataclasses.replace(printed, text="\n".join(lines))

    driver.set_active(StandInGPU())
    cache = Path(os.environ["EMBER_CACHE_DIR"]) / "triton_jit"

    def built(codegen, fn, args, mode, options=None, cuda=True):
        graph = trace(fn, *args, mode=mode)
        with record_events() as rec:
            compiled = codegen.compile_many([on_cuda(graph) if cuda else graph], options)[0]
        return compiled, [e.data["reason"] for e in rec.kinds("fallback")]

    def binaries(kernel: str) -> list[Path]:
        return list(cache.glob(f"*/{kernel}.cubin"))

    for name, (fn, args, mode) in CASES.items():
        compiled, fallbacks = built(OnSm90(), fn, args, mode)
        names = [line.split("(")[0][4:] for line in compiled.source.splitlines() if line.startswith("def ember_")]
        assert names and not fallbacks, (name, fallbacks)
        assert "from triton.language.extra import libdevice" in compiled.source  # the GPU's, not the interpreter's
        assert all(binaries(k) for k in names), (name, names)
        if name == "fractional_scale_sizes":  # math.ceil(n / 2) divides doubles, as Python did, not integers
            assert re.search(r"tl\.ceil\(\(tl\.cast\(S_\w+, tl\.float64\) / tl\.cast\(2, tl\.float64\)\)\)",
                             compiled.source), compiled.source
        if name == "repeated_layers_bf16":
            aliases = re.findall(r"^(ember_\w+) = (ember_\w+)  # the same kernel$", compiled.source, re.M)
            assert len(names) == 1 and [first for _, first in aliases] == names * 2, compiled.source
        if name == "resizes_in_bounds":
            ptx = "".join(p.with_suffix(".ptx").read_text() for k in names for p in binaries(k))
            assert "ember_err" not in compiled.source and "debug=True" not in compiled.source, compiled.source
            assert "__assertfail" not in ptx, name
        print(f"{name}:ok", flush=True)

    # on CUDA an index read from a tensor (a gather's; a scatter's, lowered as a select) asserts on the device, and
    # nothing waits for it; Triton's interpreter has no device asserts, so only the compiled PTX can show it
    for name in ("gather_checked", "scatter_select"):
        fn, args, mode = CASES[name]
        compiled, fallbacks = built(OnSm90(), fn, args, mode)
        kernels = [line.split("(")[0][4:] for line in compiled.source.splitlines() if line.startswith("def ember_")]
        ptx = [p.with_suffix(".ptx").read_text() for k in kernels for p in binaries(k)]
        assert not fallbacks and any("__assertfail" in text for text in ptx), (name, fallbacks)  # compiled in
        assert "debug=True" in compiled.source and ".item()" not in compiled.source, name
    fn, args, mode = CASES["gather_checked"]
    compiled, fallbacks = built(OnSm90(), fn, args, mode, {"triton.sync_index_checks": True})
    assert not fallbacks and "_err.item()" in compiled.source and "debug=True" not in compiled.source
    print("gather_asserts_on_cuda:ok", flush=True)

    fn, args, mode = CASES["softmax_tanh"]
    compiled, fallbacks = built(Rejected(), fn, args, mode, cuda=False)
    assert len(fallbacks) == 1 and "ember test: rejected" in fallbacks[0], fallbacks
    assert "interpreter codegen" in fallbacks[0] and "Triton could not compile kernel ember_" in fallbacks[0]
    torch.testing.assert_close(compiled(list(args))[0], fn(*args)[0])  # through ATen, on the CPU
    print("compile_error_falls_back:ok", flush=True)

    lean_launches_match_tritons(OnSm90, built, StandInGPU.launches)

    tuned_launches_go_lean(OnSm90, built, StandInGPU.launches)

    gemm_templates_compile(OnSm90, built, binaries)

    graph_passes_compile(OnSm90, binaries)

    host_number_compiles(OnSm90, binaries)

    compile_workers_fill_the_cache(OnSm90, built)

    mode_bits = stat.S_IMODE(os.stat(cache).st_mode)
    assert triton.knobs.cache.dir == str(cache) and mode_bits == 0o700, (triton.knobs.cache.dir, oct(mode_bits))
    del triton.knobs.cache.dir  # Triton's default again; a build that hits ember's cache still moves it
    os.environ.pop("TRITON_CACHE_DIR")
    fn, args, mode = CASES["softmax_tanh"]
    with record_events() as rec:
        OnSm90().compile_many([on_cuda(trace(fn, *args, mode=mode))])
    assert rec.kinds("build_cache_hit") and triton.knobs.cache.dir == str(cache), triton.knobs.cache.dir
    print("private_triton_cache:ok", flush=True)
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}  # the second process finds what this one compiled
    warm = subprocess.run([sys.executable, __file__, "--warm"], capture_output=True, text=True, timeout=600, env=env)
    assert warm.returncode == 0, warm.stderr[-4000:]
    print(warm.stdout, end="", flush=True)


def lean_launches_match_tritons(on_sm90, built, launches: list) -> None:
    """Each case's wrapper, launching through its lean launchers, makes exactly the launches (kernel, grid, stream,
    binary, hooks, every argument) that Triton's own path makes, and never enters Triton's `JITFunction.run`; an
    input at an odd offset (not 16-byte aligned, which the binaries were compiled for) takes Triton's path, which
    compiles the binary it needs."""
    import triton.runtime.jit as jit
    from ember_core.testing import assert_golden

    class Lean(on_sm90):
        def lean_launch(self, program) -> bool:  # on these CPU plans too
            return program.options.get("triton.launch", "lean") == "lean"

    entered = []
    tritons_run = jit.JITFunction.run

    def counted(self, *args, warmup, **kwargs):
        entered.append(warmup)
        return tritons_run(self, *args, warmup=warmup, **kwargs)

    jit.JITFunction.run = counted

    def launched(compiled, args) -> list:
        del launches[:], entered[:]
        compiled(list(args))
        return list(launches)

    for name, (fn, args, mode) in CASES.items():
        lean, fallbacks = built(Lean(), fn, args, mode, cuda=False)
        jitted, more = built(Lean(), fn, args, mode, {"triton.launch": "jit"}, cuda=False)
        assert not fallbacks and not more and "_lean_stream()" in lean.source and "_launch_ember_" in lean.source
        if name == "looped_symbolic":  # the lean wrapper as it reads, symbols and all
            wrapper = lean.source[lean.source.index("# ---- wrapper"):]
            assert_golden(wrapper, Path(__file__).parent / "snapshots" / "lean_launch_looped_symbolic.txt")
        launched(lean, args)  # the first call binds: it warms each kernel up, which goes through Triton's run
        ours = launched(lean, args)
        assert ours and entered == [], (name, entered)
        tritons = launched(jitted, args)
        assert [c[4:7] for c in ours] == [(None, None, None)] * len(ours)  # no metadata, no hooks to call
        assert all(not c[5].calls and not c[6].calls for c in tritons)  # Triton's: empty hook chains
        assert without_hooks(ours) == without_hooks(tritons), (name, ours, tritons)
        print(f"lean_launch_{name}:ok", flush=True)

    # training graphs (the conformance kit's: a forward, then its backward on the saved values and tangents), whose
    # kernels a GPU build binds from its manifest and launches lean, as a training step on an H100 does
    from ember_core import record_events
    from ember_core.testing import training_case, training_names

    for name in training_names():
        case = training_case(name)
        n = case.joint.joint.num_forward_outputs
        calls = {}
        for how, options in (("lean", None), ("jit", {"triton.launch": "jit"})):
            with record_events() as rec:
                forward, backward = Lean().compile_many([case.partition.forward, case.partition.backward], options)
                outs = forward(list(case.joint.primals))  # the first calls bind
                saved = [*outs[n:], *case.joint.tangents]
                backward(list(saved))
                ran, into_jit = launched(forward, case.joint.primals), list(entered)
                backward_ran = launched(backward, saved)
                ran, into_jit = ran + backward_ran, into_jit + entered
            assert not rec.kinds("fallback"), (name, [e.message for e in rec.kinds("fallback")])
            calls[how] = without_hooks(ran), into_jit
            # as autograd calls it: through `consume`, which empties the list and drops each saved value after
            # its last launch; the same launches, argument by argument
            given = list(saved)
            del launches[:]
            backward.consume(given)
            assert given == [] and without_hooks(launches) == without_hooks(backward_ran), (name, how)
        assert calls["lean"][0] and calls["lean"][1] == [], (name, calls["lean"])
        assert calls["lean"][0] == calls["jit"][0], (name, calls)
        print(f"lean_launch_training_{name}:ok", flush=True)

    fn, args, mode = CASES["softmax_tanh"]
    lean, _ = built(Lean(), fn, args, mode, cuda=False)
    aligned = launched(lean, args)
    odd = torch.randn(args[0].numel() + 1)[1:].view(args[0].shape)  # 4 bytes past an aligned start
    ours = launched(lean, [odd])
    assert entered == [False] * len(ours), entered  # every launch through Triton's path
    assert [c[3] for c in ours] != [c[3] for c in aligned], "the aligned binaries ran on unaligned data"
    jitted, _ = built(Lean(), fn, args, mode, {"triton.launch": "jit"}, cuda=False)
    assert without_hooks(ours) == without_hooks(launched(jitted, [odd]))
    print("lean_launch_odd_offset:ok", flush=True)


def warm_process() -> None:
    """A second process on the caches the first left: every case's program binds from its module entry's binaries
    manifest (`_binaries.py`) without entering Triton's JIT or compiler, and launches what Triton's own path
    launches; a kernel whose binary is gone from Triton's cache is compiled through the JIT, alone."""
    import shutil

    import triton
    import triton.runtime.jit as jit
    from ember_codegen_triton import TritonCodegen
    from ember_codegen_triton.testing import StandInGPU
    from triton.runtime.driver import driver

    driver.set_active(StandInGPU())

    class Lean(TritonCodegen):
        def serves(self, device: str) -> bool:
            return True

        def lean_launch(self, program) -> bool:
            return program.options.get("triton.launch", "lean") == "lean"

    entered: list[str] = []
    tritons_run = jit.JITFunction.run

    def counted(self, *args, **kwargs):
        entered.append(self.__name__)
        return tritons_run(self, *args, **kwargs)

    jit.JITFunction.run = counted

    def launches(compiled, args) -> list:
        del StandInGPU.launches[:]
        compiled(list(args))
        return without_hooks(StandInGPU.launches)

    for name, (fn, args, mode) in CASES.items():
        lean = Lean().compile_many([trace(fn, *args, mode=mode)])[0]
        ours = launches(lean, args)
        assert ours and entered == [], (name, entered)
        jitted = Lean().compile_many([trace(fn, *args, mode=mode)], {"triton.launch": "jit"})[0]
        assert ours == launches(jitted, args), name
        del entered[:]
    print("warm_bind_skips_the_jit:ok", flush=True)

    fn, args, mode = CASES["cross_entropy"]
    lean = Lean().compile_many([trace(fn, *args, mode=mode)])[0]
    kernels = [line.split("(")[0][4:] for line in lean.source.splitlines() if line.startswith("def ember_")]
    cache = Path(triton.knobs.cache.dir)
    # a fresh machine that took the module's entry from a remote cache or an artifact: none of its binaries are in
    # Triton's cache; the manifest holds their bytes, so they are written back and bound without the JIT
    def binaries() -> set[tuple[str, bytes]]:
        return {(p.name, p.read_bytes()) for k in kernels for s in ("cubin", "json") for p in cache.glob(f"*/{k}.{s}")}

    before = binaries()
    for group in {p.parent for k in kernels for p in cache.glob(f"*/{k}.cubin")}:
        shutil.rmtree(group)
    for module in [m for m in sys.modules if m.startswith("ember_triton_")]:  # imported again, as a fresh process
        del sys.modules[module]
    compiled = Lean().compile_many([trace(fn, *args, mode=mode)])[0]
    assert launches(compiled, args) == launches(lean, args) and entered == [], entered
    after = binaries()  # what the manifest wrote back: files the build had compiled, byte for byte
    assert after <= before and {n for n, _ in after} == {n for n, _ in before}, sorted(n for n, _ in after)
    print("warm_bind_restores_missing_binaries:ok", flush=True)


def compile_workers_fill_the_cache(on_sm90, built) -> None:
    """With two compile workers, a program's kernels are compiled in their processes: the build's own warm-up
    finds every binary in Triton's (empty before) cache, and the program runs its kernels from there."""
    import logging
    import tempfile

    import triton

    old = triton.knobs.cache.dir
    fresh = tempfile.mkdtemp(prefix="ember-triton-workers-")
    os.environ.update(EMBER_TRITON_COMPILE_WORKERS="2", TRITON_CACHE_DIR=fresh)
    triton.knobs.cache.dir = fresh
    hits: list[tuple[str, bool]] = []
    triton.knobs.compilation.listener = lambda **info: hits.append((info["src"].fn.__name__, info["cache_hit"]))
    left: list[str] = []  # what the workers left to the threads, and why
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: left.append(record.getMessage())
    kernels_log = logging.getLogger("ember.kernels")
    kernels_log.addHandler(handler)
    kernels_log.setLevel(logging.DEBUG)
    try:
        x = torch.randn(16, 64)
        fn = lambda x: (torch.softmax(x, -1) * 3, x.sum(0).sin(), x.amax(1) + 1)  # noqa: E731 - its own program
        compiled, fallbacks = built(on_sm90(), fn, (x,), "fake")
        kernels = [line for line in compiled.source.splitlines() if line.startswith("def ember_")]
        assert not fallbacks and len(kernels) >= 2, (fallbacks, kernels)
        assert hits and all(hit for _, hit in hits), (hits, left)  # each warm-up a hit on what a worker compiled
    finally:
        kernels_log.removeHandler(handler)
        triton.knobs.compilation.listener = None
        del os.environ["EMBER_TRITON_COMPILE_WORKERS"]
        os.environ["TRITON_CACHE_DIR"] = old
        triton.knobs.cache.dir = old
    print("compile_workers_fill_the_cache:ok", flush=True)


def tuned_launches_go_lean(on_sm90, built, launches: list) -> None:
    """Under max-autotune, once the first call has chosen each kernel's configuration (and a matmul template's),
    every launch goes through a lean launcher of the chosen configuration: never through Triton's
    `JITFunction.run`, and exactly the launches Triton's own path makes in those configurations (whose choices
    come from the same disk cache)."""
    import triton.runtime.jit as jit

    class Lean(on_sm90):
        def lean_launch(self, program) -> bool:
            return program.options.get("triton.launch", "lean") == "lean"

    entered = []
    tritons_run = jit.JITFunction.run

    def counted(self, *args, **kwargs):
        entered.append(self.__name__)
        return tritons_run(self, *args, **kwargs)

    jit.JITFunction.run = counted
    from ember_codegen_triton import _autotune, _gemm

    # compiles kept few: two tile configurations a template, two block sizes a kernel
    every_config, _gemm.CONFIGS = _gemm.CONFIGS, ((64, 64, 32, 4, 4), (32, 32, 32, 4, 2))
    kernel_configs = _autotune.configs
    _autotune.configs = lambda k: kernel_configs(k)[:2]
    w = torch.randn(64, 64).bfloat16()
    cases = {"softmax_tanh": CASES["softmax_tanh"][:2],
             "template": (lambda x, q, k: (F.gelu(x @ w) * 2, (q @ k.transpose(-1, -2)).tanh()),
                          (torch.randn(64, 64).bfloat16(), torch.randn(2, 32, 16), torch.randn(2, 48, 16)))}
    tune = {"mode": "max-autotune-no-cudagraphs", "triton.gemm_templates": "always"}
    try:
        for name, (fn, args) in cases.items():
            lean, fallbacks = built(Lean(), fn, args, "fake", tune, cuda=False)
            jitted, more = built(Lean(), fn, args, "fake", {**tune, "triton.launch": "jit"}, cuda=False)
            assert not fallbacks and not more, (fallbacks, more)
            runs = []
            for compiled in (lean, jitted, lean, jitted):  # the first two choose (the second reads the choices)
                del launches[:], entered[:]
                compiled(list(args))
                runs.append((without_hooks(launches), list(entered)))
            (ours, ours_entered), (tritons, _) = runs[2], runs[3]
            assert ours and ours_entered == [], (name, ours_entered)
            assert ours == tritons, (name, ours, tritons)
            if name == "template":
                assert sum(call[1][1] == 2 for call in ours) == 1, ours  # the batched template's 2-d grid
    finally:
        jit.JITFunction.run = tritons_run
        _gemm.CONFIGS, _autotune.configs = every_config, kernel_configs
    print("tuned_launches_go_lean:ok", flush=True)


def gemm_templates_compile(on_sm90, built, binaries) -> None:
    """Matmul templates (`_gemm.py`) under max-autotune, as a GPU gets them: bfloat16 tiles straight into `tl.dot`
    (the interpreter gets them widened), float32 at torch's default precision, a batched one; every configuration
    the tuner tries is compiled for sm_90 (each one's launch compiles it: the stand-in records launches)."""
    from ember_codegen_triton._gemm import configs

    w = torch.randn(256, 256).bfloat16()
    cases = {
        "bf16_linear_gelu": (lambda x, r: (F.gelu(x @ w).float() + r,),
                             (torch.randn(256, 256).bfloat16(), torch.randn(256, 256))),
        # the product also returned (saved for a backward): the template stores it as well
        "f32_addmm_relu": (lambda x: ((y := F.linear(x, W32, B32)), torch.relu(y)), (torch.randn(64, 32),)),
        "f16_bmm_scale": (lambda q, k: ((q @ k.transpose(-1, -2)) * 0.125,),
                          (torch.randn(2, 64, 32).half(), torch.randn(2, 64, 32).half())),
    }
    options = {"mode": "max-autotune", "triton.gemm_templates": "always"}
    for name, (fn, args) in cases.items():
        compiled, fallbacks = built(on_sm90(), fn, args, "fake", options, cuda=False)
        gemm = [g for n, g in compiled.fn.__globals__.items() if n.startswith("_gemm_")]
        assert len(gemm) == 1 and not fallbacks, (name, fallbacks)
        template = compiled.source[compiled.source.index(f"def {gemm[0].t.name}("):]
        assert ".to(tl.float32)" not in template.split("acc += tl.dot")[0], name  # the interpreter's widening
        assert gemm[0].t.stores_product == (name == "f32_addmm_relu"), name
        compiled(list(args))  # the tuner launches each configuration: each compiles
        built_for = binaries(gemm[0].t.name)
        assert len(built_for) == len(configs(gemm[0].t.sizes)), (name, len(built_for))
    print("gemm_templates:ok", flush=True)


W32, B32 = torch.randn(48, 32), torch.randn(48)


def graph_passes_compile(on_sm90, binaries) -> None:
    """CUDA graphs after the GPU's graph passes, in bfloat16 (what autocast gives a GPU), compiled for sm_90: a CNN
    relaid NHWC by `channels-last` (its kernels read and write channels-last strides, the clones at its edges) and a
    head whose product `pad-gemms` pads in K and N (the pads, the copy of the first N columns fused after it). The
    interpreter runs these graphs on the CPU in the passes' own tests; here Triton compiles them as a GPU would."""
    from ember_codegen_triton.graph_passes import PadGemms
    from ember_core import record_events, verify
    from ember_lowering.graph_passes import ChannelsLast

    def cnn(x, w1, w2, scale, wl):
        y = F.relu(F.conv2d(x, w1, padding=1) * scale[None, :, None, None])
        y = F.max_pool2d(F.conv2d(y, w2, padding=1) + y, 2)
        return (F.linear(y.flatten(1), wl).float().softmax(-1), y, y.permute(0, 2, 3, 1))  # y and a view of it

    def head(b, x, w):
        return (torch.addmm(b, x, w).relu() * 2,)

    bf16 = torch.bfloat16
    cases = {
        "channels-last": (ChannelsLast(decide=lambda convs: True), cnn,
                          (torch.randn(2, 4, 8, 8, dtype=bf16), torch.randn(6, 4, 3, 3, dtype=bf16),
                           torch.randn(6, 6, 3, 3, dtype=bf16), torch.randn(6, dtype=bf16),
                           torch.randn(5, 6 * 4 * 4, dtype=bf16))),
        "pad-gemms": (PadGemms(decide=lambda gemm: True), head,
                      (torch.randn(10, dtype=bf16), torch.randn(4, 12, dtype=bf16), torch.randn(12, 10, dtype=bf16))),
    }
    for name, (graph_pass, fn, args) in cases.items():
        graph = on_cuda(trace(fn, *args))
        after = graph_pass.run(graph)
        assert after is not graph, name  # the pass rewrote it
        verify(after)
        with record_events() as rec:
            compiled = on_sm90().compile_many([after])[0]
        fallbacks = [e.data["reason"] for e in rec.kinds("fallback")]
        kernels = [line.split("(")[0][4:] for line in compiled.source.splitlines() if line.startswith("def ember_")]
        assert kernels and not fallbacks, (name, fallbacks)
        assert all(binaries(k) for k in kernels), (name, kernels)
    print("graph_passes_bf16:ok", flush=True)


def host_number_compiles(on_sm90, binaries) -> None:
    """A CUDA graph whose first input is a 0-d CPU float64 (Dynamo's form of a float that changed: an optimizer
    step's learning rate under a scheduler) is planned for CUDA: its kernels, which read a device copy of the
    number made by one ATen call, compile for sm_90, and an ATen call reads the number on the host."""
    from ember_core import Ref, record_events

    def step(lr, p, g):
        rate = lr.item()
        return (torch.add(p, g, alpha=-rate), torch.addmm(p, p.t(), p, alpha=rate))

    graph = on_cuda(trace(step, torch.tensor(0.1, dtype=torch.float64), torch.randn(4, 4), torch.randn(4, 4)))
    lr = graph.inputs[0].name
    graph = dataclasses.replace(graph, values={**graph.values, lr: dataclasses.replace(graph.values[lr], device="cpu")})
    with record_events() as rec:
        compiled = on_sm90().compile_many([graph])[0]
    fallbacks = [e.data["reason"] for e in rec.kinds("fallback")]
    kernels = [line.split("(")[0][4:] for line in compiled.source.splitlines() if line.startswith("def ember_")]
    assert kernels and not fallbacks and all(binaries(k) for k in kernels), (kernels, fallbacks)
    host = f"b_{lr}"  # the input itself, not its device copy, is what the ATen call reads the number from
    assert f"alpha={host}.item())" in compiled.source, compiled.source
    from ember_lowering import Extern, lower

    # the one copy the plan makes takes the CPU input to the plan's GPU, as float64 (the kernels convert)
    copies = [s for s in lower(graph).steps if isinstance(s, Extern) and s.op == "aten._to_copy.default"]
    assert [(c.args, set(c.kwargs), c.kwargs["device"].type) for c in copies] == [((Ref(lr),), {"device"}, "cuda")], \
        copies
    launches = [line for line in compiled.source.splitlines() if "_launch_ember_" in line and "(" in line
                and not line.lstrip().startswith("def ")]
    # no kernel is handed the host tensor (a GPU would read host memory): each takes its device copy
    assert launches and not [line for line in launches if re.search(rf"\b{host}\b", line)], launches
    print("host_number_on_cuda:ok", flush=True)


def without_hooks(calls: list[tuple]) -> list[tuple]:
    """Recorded launches without the launch metadata and hooks: kernel, grid, stream, binary, arguments."""
    return [c[:4] + c[7:] for c in calls]


if __name__ == "__main__":
    warm_process() if "--warm" in sys.argv else main()
