"""The autograd conformance kit: subclass `AutogradConformance` in a plugin's tests.

    from ember_core.testing import AutogradConformance

    class TestMyAutograd(AutogradConformance):
        autograd = MyAutograd()
        partitioner = MyPartitioner()    # optional: splits the joint graphs (default: ember-core's RegionPartitioner)

For each battery graph, plus the kit's own (outputs aliasing an input, a buffer written in place, a custom autograd
function call whose backward is not the derivative of its forward, which must differentiate it), the kit builds
`autograd.joint(graph, example_inputs)` and checks the `JointGraph` layout; then partitions it, compiles both halves
with ember-core's interpreter codegen and runs `autograd.wrap(...)`: outputs, their requires_grad and the gradients
of every input must equal eager PyTorch's (`torch.testing.assert_close`), and the backward must be compiled once,
on the first backward. Floating inputs require grad, except those the graph writes in place (buffers).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch
import torch.fx as fx

from .._builtin import interpreter_codegen
from .._errors import GraphError
from ..graph._fingerprint import fingerprint
from ..graph._schema import Graph, Input, Output
from ..graph._verify import verify
from ..plugins._stages import Autograd, CompiledGraph, JointGraph
from ._battery import BatteryCase, CaseSpec, battery_case, battery_names, trace_case
from ._custom_function import gate_model, gate_reference, stamp_gate
from ._joint import RegionPartitioner, with_grad

# ---------------------------------------------------------------------------------------------- the kit's cases


def _alias_outputs(x, w):
    return (x.view(-1), (x * w).sum(), x.t())


def _stamp_aliases(gm: fx.GraphModule) -> None:
    """Outputs 0 and 2 are views of input 0 (the frontend's job, done by hand)."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    names = [a.name for a in out.args[0]]
    out.meta["ember_outputs"] = [Output(names[0], "alias", 0), Output(names[1]), Output(names[2], "alias", 0)]


def _buffer_update(x, w, buf):
    new = buf + 1
    return (new, ((x * w).sin() + new).sum(1))


def _buffer_update_eager(x, w, buf):
    buf.add_(1)
    return (buf, ((x * w).sin() + buf).sum(1))


def _stamp_buffer(gm: fx.GraphModule) -> None:
    """Input 2 is written in place: output 0 carries its new content."""
    buf = [n for n in gm.graph.nodes if n.op == "placeholder"][2]
    buf.meta["ember_input"] = Input(buf.name, "buffer", mutated=True)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    names = [a.name for a in out.args[0]]
    out.meta["ember_outputs"] = [Output(names[0], "mutation", 2), Output(names[1])]


def _x_w(n: int, g: torch.Generator) -> list:
    return [torch.randn(n, 8, generator=g), torch.randn(8, generator=g)]


KIT_CASES = {
    "alias_outputs": CaseSpec("alias_outputs", _alias_outputs, _x_w, stamp=_stamp_aliases),
    "buffer_update": CaseSpec("buffer_update", _buffer_update, lambda n, g: [*_x_w(n, g), torch.zeros(8)],
                              stamp=_stamp_buffer, reference=_buffer_update_eager),
    "custom_function": CaseSpec("custom_function", gate_model, _x_w, stamp=stamp_gate, reference=gate_reference),
}


@functools.cache
def autograd_case(name: str) -> BatteryCase:
    """A battery case or one of the kit's (cached)."""
    return trace_case(KIT_CASES[name]) if name in KIT_CASES else battery_case(name)


# ---------------------------------------------------------------------------------------------- the kit


class AutogradConformance:
    """Base test class (pytest collects its subclasses). Set `autograd`; optionally `partitioner`, `rtol`/`atol`
    (None: assert_close's defaults) and `skip_cases` (case name → reason)."""

    autograd: Any = None
    partitioner: Any = RegionPartitioner()
    rtol: float | None = None
    atol: float | None = None
    skip_cases: Mapping[str, str] = {}

    def _case(self, name: str) -> BatteryCase:
        if self.autograd is None:
            pytest.fail(f"{type(self).__name__}.autograd is not set: give it the autograd object to test")
        if name in self.skip_cases:
            pytest.skip(self.skip_cases[name])
        return autograd_case(name)

    def _joint(self, case: BatteryCase, inputs: Sequence[Any]) -> JointGraph:
        joint = self.autograd.joint(case.graph, inputs)
        assert isinstance(joint, JointGraph), (
            f"{case.name}: {type(self.autograd).__name__}.joint returned {type(joint).__name__}, "
            "not ember_core.JointGraph")
        return joint

    def _wrap(self, case: BatteryCase, counter: list | None = None):
        joint = self._joint(case, _grad_inputs(case, case.inputs))
        part = self.partitioner.partition(joint, {})

        def compile_backward() -> CompiledGraph:
            if counter is not None:
                counter.append(1)
            return interpreter_codegen().compile(part.backward, None, {})

        forward = interpreter_codegen().compile(part.forward, None, {})
        return self.autograd.wrap(part, forward, compile_backward)

    # ------------------------------------------------------------------------------------------ tests

    def test_implements_the_autograd_protocol(self) -> None:
        self._case("softmax")
        assert isinstance(self.autograd, Autograd), (
            f"{type(self.autograd).__name__} lacks joint(graph, example_inputs) or wrap(partition, forward, "
            "compile_backward): see ember_core.Autograd")

    @pytest.mark.parametrize("case_name", (*battery_names(), *KIT_CASES))
    def test_joint_graph_keeps_the_layout(self, case_name: str) -> None:
        case = self._case(case_name)
        before = fingerprint(case.graph)
        joint = self._joint(case, _grad_inputs(case, case.inputs))
        assert fingerprint(case.graph) == before, f"{case_name}: joint changed the graph it was given"
        assert_joint_layout(case.graph, joint, case_name)

    @pytest.mark.parametrize("case_name", (*battery_names(), *KIT_CASES))
    def test_outputs_and_gradients_match_eager(self, case_name: str) -> None:
        case = self._case(case_name)
        run = self._wrap(case)
        for k, inputs in enumerate(case.input_sets()):
            self._check_call(case, run, inputs, f"{case_name} (input set {k})")

    def test_backward_is_compiled_once_on_first_use(self) -> None:
        case = self._case("pointwise_chain")
        compiles: list[int] = []
        run = self._wrap(case, compiles)
        outs = run(_grad_inputs(case, case.inputs))
        assert compiles == [], "the backward was compiled before any backward ran"
        for _ in range(2):
            sum(o.sum() for o in outs).backward()
            outs = run(_grad_inputs(case, case.inputs))
        assert compiles == [1], f"two backward passes compiled the backward {len(compiles)} times, not once"

    def _check_call(self, case: BatteryCase, run, inputs: Sequence[Any], where: str) -> None:
        compiled_in, eager_in = _grad_inputs(case, inputs), _grad_inputs(case, inputs)
        got, want = list(run(compiled_in)), list(case.reference(*eager_in))
        assert len(got) == len(want), f"{where}: {len(got)} outputs, eager gives {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            self._close(g, w, f"{where}, output {k}")
            assert _needs_grad(g) == _needs_grad(w), (
                f"{where}, output {k}: requires_grad is {_needs_grad(g)}, eager's is {_needs_grad(w)}")
        cotangents = _cotangents(want)
        got_grads, want_grads = _grads(got, compiled_in, cotangents), _grads(want, eager_in, cotangents)
        for k, (g, w) in enumerate(zip(got_grads, want_grads)):
            self._close_grad(g, w, f"{where}, gradient of input {k}")

    def _close(self, got: Any, want: Any, where: str) -> None:
        torch.testing.assert_close(got, want, rtol=self.rtol, atol=self.atol, equal_nan=True,
                                   msg=lambda m: f"{where}: {m}")

    def _close_grad(self, got: Any, want: Any, where: str) -> None:
        """Equal gradients; where eager has none, the compiled one is none or zero."""
        if want is None:
            assert got is None or not got.any(), f"{where}: eager has no gradient, got a nonzero one"
            return
        assert got is not None, f"{where}: no gradient, eager has one"
        self._close(got, want, where)


# ---------------------------------------------------------------------------------------------- checks


def assert_joint_layout(graph: Graph, joint: JointGraph, where: str = "joint") -> None:
    """The `ember_core.JointGraph` layout for `graph`, each broken rule named."""
    try:
        verify(joint.graph)
    except GraphError as e:
        raise AssertionError(f"{where}: the joint graph does not verify: {e}") from e
    g, n, f = joint.graph, joint.num_primals, joint.num_forward_outputs
    assert n == len(graph.inputs), f"{where}: num_primals is {n}, the graph has {len(graph.inputs)} inputs"
    assert [i.kind for i in g.inputs[:n]] == [i.kind for i in graph.inputs], (
        f"{where}: the primals' kinds {[i.kind for i in g.inputs[:n]]} are not the graph's inputs' kinds")
    assert all(i.kind == "tangent" for i in g.inputs[n:]), f"{where}: inputs after the primals must be tangents"
    assert _kinds(g.outputs[:f]) == _kinds(graph.outputs), (
        f"{where}: forward outputs {_kinds(g.outputs[:f])} are not the graph's outputs {_kinds(graph.outputs)}")
    grads = [o.input for o in g.outputs[f:]]
    assert all(o.kind == "grad" for o in g.outputs[f:]) and len(set(grads)) == len(grads), (
        f"{where}: outputs after the forward ones must be one `grad` per primal, got {_kinds(g.outputs[f:])}")
    assert all(k is not None and 0 <= k < n for k in grads), f"{where}: a grad output names no primal: {grads}"
    regions = {node.meta.get("region") for node in g.nodes}
    assert regions <= {"forward", "backward"}, f"{where}: node regions must be forward or backward, got {regions}"


def _kinds(outputs: Sequence[Output]) -> list[tuple[str, int | None]]:
    return [(o.kind, o.input) for o in outputs]


def _grad_inputs(case: BatteryCase, inputs: Sequence[Any]) -> list:
    """Copies of the inputs, floating ones requiring grad except those the graph writes in place."""
    frozen = [k for k, i in enumerate(case.graph.inputs) if i.mutated]
    return with_grad(inputs, frozen)


def _needs_grad(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def _cotangents(outputs: Sequence[Any]) -> list:
    gen = torch.Generator().manual_seed(7)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype) if _needs_grad(o) else None for o in outputs]


def _grads(outputs: Sequence[Any], inputs: Sequence[Any], cotangents: Sequence[Any]) -> list:
    """d(sum of outputs · cotangents) / d(each input requiring grad); None where unused."""
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if c is not None and _needs_grad(o)]
    wrt = [x for x in inputs if _needs_grad(x)]
    if not pairs or not wrt:
        return [None] * len(wrt)
    return list(torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs], allow_unused=True))

