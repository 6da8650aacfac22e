"""The codegen conformance kit: subclass `CodegenConformance` in a plugin's tests to check a codegen on the battery.

    from ember_core.testing import CodegenConformance

    class TestMyCodegen(CodegenConformance):
        codegen = MyCodegen()
        device = "cpu"          # or "cuda": moves every battery graph and its inputs there

Every battery graph is compiled once and run on several input sets (a second seed; a second size for symbolic
graphs); each output is compared with the reference interpreter's with `torch.testing.assert_close`. The kit's
training cases (attention with scores divided by sqrt(d), with and without a causal mask; layer norm by hand and
by torch, RMSNorm and var_mean under a mean loss; cross-entropy, GELU, softmax and log_softmax over the outer dim)
give a forward and a backward graph each, decomposed to core ATen as ember's capture gives them: their fused
reductions are where codegens go wrong.

Fallbacks are counted by cause (`ember_core.FALLBACK_CAUSES`) while each case compiles and runs. A build failure
always fails the case; so does any other cause not in `fallbacks_allowed` (default: every cause but `build`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from ..events._events import FALLBACK_CAUSES
from ..execution._interpreter import Interpreter
from ..graph._fingerprint import fingerprint
from ..graph._schema import Graph
from ..plugins._stages import CompiledGraph, Partition
from ._battery import TRACE_SIZE, BatteryCase, battery_case, battery_names, battery_spec, clone_inputs
from ._devices import DeviceAudit, graph_to_device, inputs_to_device
from ._fallbacks import FallbackRecorder
from ._joint import JointCase, RegionPartitioner, run_partition, trace_joint, with_grad

F = torch.nn.functional

# ---------------------------------------------------------------------------------------------- training cases


def attention(q, k, v):
    """Attention as models write it by hand: scores divided by sqrt(d), softmax (each of its loops divides)."""
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return (scores.softmax(-1) @ v,)


def causal_attention(q, k, v):
    t = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v,)


def norms(x, w, b):
    """Layer norm by hand and by torch, RMSNorm and var_mean, under a mean loss (its constant cotangent folds
    into the backward's loops)."""
    mean = x.mean(-1, keepdim=True)
    by_hand = (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 1e-5) * w + b
    rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    loss = by_hand.pow(2).mean() + F.layer_norm(x, (x.shape[-1],), w, b).mean() + rms.mean()
    return (loss, torch.var_mean(x, 0)[0])


def losses(x, target):
    """Cross-entropy, GELU, and log_softmax and softmax over the outer dim (lanes across rows)."""
    return (F.cross_entropy(x, target), F.gelu(x) * x.log_softmax(0), (x.softmax(0) * x).sum())


def _qkv(n: int, g: torch.Generator) -> list:
    return [torch.randn(2, 2, n, 8, generator=g) for _ in range(3)]


_TRAINING = {
    "attention": (attention, _qkv),
    "causal_attention": (causal_attention, _qkv),
    "norms": (norms, lambda n, g: [torch.randn(n, 3, 16, generator=g), torch.randn(16, generator=g),
                                   torch.randn(16, generator=g)]),
    "losses": (losses, lambda n, g: [torch.randn(n, 10, generator=g), torch.randint(0, 10, (n,), generator=g)]),
    "softmax": None,  # the battery's cases, trained
    "multi_output": None,
}


@dataclass(frozen=True)
class TrainingCase:
    """A function's joint graph at real inputs (`joint.primals`, `joint.tangents`) and its reference partition:
    `partition.forward` on the primals, then `partition.backward` on the saved values and tangents."""

    name: str
    joint: JointCase
    partition: Partition


def training_names() -> tuple[str, ...]:
    return tuple(_TRAINING)


@functools.cache
def training_case(name: str) -> TrainingCase:
    """Trace one training case (cached): floating inputs get gradients, tangents are random."""
    fn, make_inputs = _TRAINING[name] or (battery_spec(name).fn, battery_spec(name).make_inputs)
    primals = with_grad(make_inputs(TRACE_SIZE, torch.Generator().manual_seed(0)))
    joint = trace_joint(fn, primals, decompose=True, name=f"{name}_training")
    return TrainingCase(name, joint, RegionPartitioner().partition(joint.joint))


class CodegenConformance:
    """Base test class (pytest collects its subclasses). Set `codegen`; optionally `device`, `options`, and
    `rtol`/`atol` (None: assert_close's defaults for the dtype). `skip_cases` maps case names to a reason
    (`training:<name>` for a training case); `fallbacks_allowed` names the fallback causes a case may take."""

    codegen: Any = None
    device: str = "cpu"
    options: Mapping[str, Any] = {}
    rtol: float | None = None
    atol: float | None = None
    skip_cases: Mapping[str, str] = {}
    fallbacks_allowed: Collection[str] = tuple(c for c in FALLBACK_CAUSES if c != "build")

    # ------------------------------------------------------------------------------------------ helpers

    def _check_setup(self, name: str) -> None:
        if self.codegen is None:
            pytest.fail(f"{type(self).__name__}.codegen is not set: give it the codegen object to test")
        if name in self.skip_cases:
            pytest.skip(self.skip_cases[name])
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            pytest.skip(f"device {self.device!r} needs CUDA")
        if "build" in self.fallbacks_allowed:
            pytest.fail(f"{type(self).__name__}.fallbacks_allowed holds 'build': a build failure is never allowed")

    def _case(self, name: str) -> tuple[BatteryCase, Graph]:
        self._check_setup(name)
        case = battery_case(name)
        return case, graph_to_device(case.graph, self.device)

    def _inputs(self, inputs: Sequence[Any]) -> list:
        return inputs_to_device(inputs, self.device)

    def _compile(self, graph: Graph, inputs: Sequence[Any]) -> CompiledGraph:
        compiled = self.codegen.compile(graph, inputs, dict(self.options))
        assert isinstance(compiled, CompiledGraph), (
            f"{type(self.codegen).__name__}.compile returned {type(compiled).__name__}, not ember_core.CompiledGraph"
        )
        return compiled

    def _compare(self, name: str, got: Sequence[Any], want: Sequence[Any], what: str) -> None:
        assert len(got) == len(want), f"{name} ({what}): {len(got)} outputs, the interpreter gives {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            self._compare_one(f"{name} ({what}), output {k}", g, w)

    def _compare_one(self, where: str, got: Any, want: Any) -> None:
        if not isinstance(want, torch.Tensor):
            assert got == want, f"{where}: {got!r} != {want!r}"
            return
        assert isinstance(got, torch.Tensor), f"{where}: expected a tensor, got {type(got).__name__}"
        assert got.device.type == want.device.type, f"{where}: on {got.device}, expected {want.device}"
        torch.testing.assert_close(got, want, rtol=self.rtol, atol=self.atol, equal_nan=True,
                                   msg=lambda m: f"{where}: {m}")

    # ------------------------------------------------------------------------------------------ tests

    @pytest.mark.parametrize("case_name", battery_names())
    def test_outputs_match_interpreter(self, case_name: str) -> None:
        case, graph = self._case(case_name)
        with FallbackRecorder() as fallbacks:
            compiled = self._compile(graph, self._inputs(case.inputs))
            oracle = Interpreter(graph)
            for k, inputs in enumerate(case.input_sets()):
                inputs = self._inputs(inputs)
                want = oracle.run(clone_inputs(inputs))
                with DeviceAudit() as audit:
                    got = compiled(clone_inputs(inputs))
                audit.check(f"{case_name}, input set {k}")
                self._compare(case_name, list(got), want, f"input set {k}, shapes {_shapes(inputs)}")
        fallbacks.check(case_name, self.fallbacks_allowed)

    @pytest.mark.parametrize("case_name", training_names())
    def test_training_graphs_match_interpreter(self, case_name: str) -> None:
        """The forward then the backward graph of a training case, against the interpreter on the same graphs."""
        self._check_setup(f"training:{case_name}")
        case = training_case(case_name)
        part = Partition(graph_to_device(case.partition.forward, self.device),
                         graph_to_device(case.partition.backward, self.device), case.partition.saved, "")
        joint = JointCase(case.joint.joint, self._inputs(case.joint.primals), self._inputs(case.joint.tangents))
        n = joint.joint.num_forward_outputs
        with FallbackRecorder() as fallbacks:
            forward = self._compile(part.forward, joint.primals)
            with DeviceAudit() as audit:
                outs = list(forward(clone_inputs(joint.primals)))
            inputs = [*outs[n:], *joint.tangents]
            backward = self._compile(part.backward, inputs)
            with audit:
                got = outs[:n] + list(backward(clone_inputs(inputs)))
            audit.check(f"training:{case_name}")
        fallbacks.check(f"training:{case_name}", self.fallbacks_allowed)
        self._compare(f"training:{case_name}", got, run_partition(joint, part), "forward then backward")

    @pytest.mark.parametrize("case_name", battery_names())
    def test_compile_leaves_graph_unchanged(self, case_name: str) -> None:
        case, graph = self._case(case_name)
        before = fingerprint(graph), str(graph)
        compiled = self._compile(graph, self._inputs(case.inputs))
        assert (fingerprint(graph), str(graph)) == before, f"{case_name}: compile changed the graph it was given"
        assert compiled.graph == graph, f"{case_name}: CompiledGraph.graph is not the graph that was compiled"
        assert compiled.codegen, f"{case_name}: CompiledGraph.codegen should name the codegen"


def _shapes(inputs: Sequence[Any]) -> str:
    return ", ".join(str(tuple(x.shape)) if isinstance(x, torch.Tensor) else repr(x) for x in inputs)
