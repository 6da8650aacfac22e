"""The shared codegen layer carries a second codegen: `ToyCodegen` says only how its kernels "print" (they stay
loop IR, run by the loop-IR interpreter), how its unit builds (a text file in a verified disk cache, made in the
build pool) and how the wrapper calls a segment. Everything else (steps, layout, wrapper, relayout, fallbacks and
their events, lazy binding) is the layer's, and the codegen conformance kit passes on it."""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

import pytest
import torch
from ember_core import DiskCache, FallbackWarning, record_events
from ember_core.testing import CodegenConformance
from ember_lowering import Kernel, recompute_locals
from ember_lowering.codegen import (
    BuildPool,
    CannotPrint,
    ExternDtypeError,
    InterpretedKernel,
    LazyBinding,
    PlanCodegen,
    PlanLayout,
    PrintedKernel,
    Program,
    Segment,
    WrapperWriter,
    interpreted_kernel,
)
from lowering_checks import trace


@dataclass(frozen=True)
class ToyKernel(PrintedKernel):
    kernel: Kernel | None = None
    touched: tuple[str, ...] = ()


class ToyWriter(WrapperWriter):
    def call_segment(self, seg: Segment) -> None:
        syms = [self.layout.sym_local[s] for s in self.layout.symbols]
        for k in seg.kernels:
            self.emit(f"{k.name}([{', '.join([self.tensor(b) for b in k.touched] + syms)}])")


class ToyCodegen(PlanCodegen):
    name, stage, language = "toy", "codegen-toy", "toy"

    def __init__(self, refuse: str = "", cache: DiskCache | None = None):
        self.refuse = refuse
        self.pool = BuildPool(cache or DiskCache("toy_codegen_test", ("txt",)), "toy")
        self.builds = 0

    def print_kernel(self, kernel: Kernel, layout: PlanLayout, name: str) -> PrintedKernel:
        if self.refuse and self.refuse in kernel.name:
            raise CannotPrint(f"toy refuses {self.refuse} kernels")
        kernel = recompute_locals(kernel, {n for n, b in layout.buffers.items() if b.kind == "local"})
        touched = tuple(dict.fromkeys(i.buffer for i in kernel.instrs() if i.buffer))
        writes = frozenset(layout.root(i.buffer) for i in kernel.instrs() if i.op.value == "store")
        roots = tuple(dict.fromkeys(layout.root(b) for b in touched))
        return ToyKernel(name, roots, writes, f"{name}: {kernel.name}", kernel, touched)

    def wrapper_writer(self, program: Program, fn_name: str, constants: dict) -> WrapperWriter:
        return ToyWriter(program, fn_name, constants)

    def start_build(self, graph, program: Program, writer: WrapperWriter, env: dict) -> LazyBinding:
        def make(work):
            self.builds += 1
            return {"txt": program.source.encode()}, {}

        build = self.pool.get(hashlib.sha256(program.source.encode()).hexdigest()[:40], {"graph": graph.name}, make)

        def bind(found, env: dict) -> None:
            assert found.data["txt"] == program.source.encode()  # what the build made is what was printed
            for k in program.kernels:
                step = InterpretedKernel(k.kernel, "toy")
                env[k.name] = interpreted_kernel(program.plan, step, list(k.touched), program.layout.symbols)

        lazy = LazyBinding(build, graph, [k.name for k in program.kernels], env, bind, self.stage)
        lazy.install_stubs()
        return lazy


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))


def softmax(x):
    return (torch.softmax(x, -1) * 2,)


def test_a_second_codegen_runs_kernels_through_the_layer():
    x = torch.randn(6, 10)
    codegen = ToyCodegen()
    with record_events() as ev:
        compiled = codegen.compile(trace(softmax, x))
        torch.testing.assert_close(compiled([x])[0], softmax(x)[0])
        torch.testing.assert_close(compiled([x + 1])[0], softmax(x + 1)[0])
    assert compiled.codegen == "toy" and codegen.builds == 1
    assert not ev.kinds("fallback")
    [generated] = ev.kinds("kernels_generated")
    assert "toy kernels in 1 segments" in generated.message
    assert "def graph_graph(inputs):" in compiled.source and "k0_" in compiled.source


def test_a_build_reports_its_time_once_when_the_first_call_binds_it():
    x = torch.randn(6, 10)
    with record_events() as ev:
        compiled = ToyCodegen().compile(trace(softmax, x))
        [generated] = ev.kinds("kernels_generated")
        assert not ev.kinds("kernels_built")  # the build has not been waited for yet
        compiled([x])
        compiled([x])
    [built] = ev.kinds("kernels_built")
    assert built.graph is generated.graph and built.stage == "codegen-toy" and built.artifact == "kernels"
    assert built.data["seconds"] >= 0 and built.data["waited"] >= 0
    assert generated.data["seconds"] >= 0
    with record_events() as again:  # a build from the cache is bound at once: nothing was built
        ToyCodegen().compile(trace(softmax, x))([x])
    assert not again.kinds("kernels_built")


def test_inputs_in_another_layout_are_relaid_out_by_the_layer():
    x = torch.randn(10, 6)
    compiled = ToyCodegen().compile(trace(softmax, x.t().contiguous()))
    torch.testing.assert_close(compiled([x.t()])[0], softmax(x.t())[0])


def test_a_kernel_the_codegen_cannot_print_runs_interpreted_and_is_reported():
    x = torch.randn(4, 8)
    with record_events() as ev, warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # one kernel interpreted is reported, not warned about
        compiled = ToyCodegen(refuse="reduce").compile(trace(softmax, x))
        torch.testing.assert_close(compiled([x])[0], softmax(x)[0])
    reasons = [e.data["reason"] for e in ev.kinds("fallback")]
    assert reasons and all("runs in the loop-IR interpreter: toy refuses reduce kernels" in r for r in reasons)


class BrokenBuild(ToyCodegen):
    """Its builds fail ("disk on fire"); `key` names the build in the pool."""

    def __init__(self, key: str = "0" * 40):
        super().__init__()
        self.key = key

    def start_build(self, graph, program, writer, env):
        def make(work):
            raise OSError("disk on fire")

        build = self.pool.get(self.key, {}, make)
        lazy = LazyBinding(build, graph, [k.name for k in program.kernels], env, lambda f, e: None, self.stage)
        lazy.install_stubs()
        return lazy


def test_a_failed_build_runs_the_graph_in_the_interpreter_codegen():
    x = torch.randn(4, 8)
    with record_events() as ev, pytest.warns(FallbackWarning, match="toy.*the build failed.*disk on fire") as told:
        compiled = BrokenBuild().compile(trace(softmax, x))
        for _ in range(2):
            torch.testing.assert_close(compiled([x])[0], softmax(x)[0])
    [event] = ev.kinds("fallback")
    assert "the build failed" in event.data["reason"] and "disk on fire" in event.data["reason"]
    assert len([w for w in told if w.category is FallbackWarning]) == 1  # once per graph, not per call


def test_a_graph_that_cannot_lower_runs_in_the_interpreter_codegen_labelled_so(monkeypatch):
    import ember_lowering._plan_cache as plans

    def fail(graph, **how):
        raise RuntimeError("no lowering today")

    monkeypatch.setattr(plans, "lower_with_text", fail)  # what the codegen layer's `lower_cached` calls on a miss
    x = torch.randn(3, 4)
    with record_events() as ev, pytest.warns(FallbackWarning, match="lowering failed: RuntimeError: no lowering"):
        compiled = ToyCodegen().compile(trace(softmax, x))
    torch.testing.assert_close(compiled([x])[0], softmax(x)[0])
    assert compiled.codegen == "interpreter"
    [event] = ev.kinds("fallback")
    assert "runs in the interpreter codegen: lowering failed: RuntimeError: no lowering today" in event.message


def test_a_printer_that_raises_sends_the_graph_to_the_interpreter_codegen_as_a_print_fallback():
    class Buggy(ToyCodegen):
        def print_kernel(self, kernel, layout, name):
            raise KeyError("a printer bug")

    x = torch.randn(3, 4)
    with record_events() as ev, pytest.warns(FallbackWarning, match="printing failed: KeyError"):
        compiled = Buggy().compile(trace(softmax, x))
    torch.testing.assert_close(compiled([x])[0], softmax(x)[0])
    [event] = ev.kinds("fallback")
    assert event.data["cause"] == "print" and "printing failed: KeyError" in event.message


def test_a_custom_function_call_runs_in_the_interpreter_codegen_with_its_backward():
    """The call has no kernel; the interpreter codegen applies its backward subgraph (Gate's is not the derivative
    of its forward), so even a graph run under eager autograd gets the author's gradient."""
    from ember_core.testing import gate_graph
    from ember_core.testing._custom_function import gate_reference

    with record_events() as ev, pytest.warns(FallbackWarning, match="custom autograd function"):
        compiled = ToyCodegen().compile(gate_graph())
    assert compiled.codegen == "interpreter"
    [event] = ev.kinds("fallback")
    assert "a custom autograd function call has no kernel of its own" in event.data["reason"]
    ember_in = [torch.randn(6, 8, requires_grad=True), torch.randn(8, requires_grad=True)]
    eager_in = [t.detach().clone().requires_grad_() for t in ember_in]
    compiled(ember_in)[0].sum().backward()
    gate_reference(*eager_in)[0].sum().backward()
    for got, want in zip(ember_in, eager_in):
        torch.testing.assert_close(got.grad, want.grad)


class TestToyCodegenConformance(CodegenConformance):
    codegen = ToyCodegen()


def test_an_extern_result_of_another_dtype_than_the_plan_raises_instead_of_being_read():
    """Kernels read an extern's result as the plan's dtype: a bf16 result read as float32 gave NaN at 045a3fc (the
    graph run under the autocast it was captured with). The wrapper checks the dtype and raises."""
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    compiled = ToyCodegen().compile(trace(lambda a, b: (torch.relu(a @ b),), x, w))
    torch.testing.assert_close(compiled([x, w])[0], torch.relu(x @ w))
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ExternDtypeError, match=r"extern aten\.mm\."
                                                                    r"default returned torch\.bfloat16 where the "
                                                                    r"kernel plan has torch\.float32"):
        compiled([x, w])
