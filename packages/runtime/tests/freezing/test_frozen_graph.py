"""The runtime's freezing: when it is on, and how a frozen graph notices its parameters changing."""

from __future__ import annotations

import pytest
import torch
from _freezing_graphs import traced
from ember_core import get_plugin_manager, hookimpl, reset_plugin_manager
from ember_runtime import compile, record_events
from ember_runtime._frozen_graph import MAX_REFREEZES


class ParamFrontend:
    """Compiles `fn(x, *params)` once, on its first call, with every input after the first a parameter."""

    def wrap(self, fn, compile_graph, options):
        compiled = []

        def run(*args):
            if not compiled:
                graph = traced(fn, *args, params=tuple(range(1, len(args))))
                compiled.append(compile_graph(graph, list(args)))
            return compiled[0](list(args))[0]

        return run


class ParamPlugin:
    @hookimpl
    def ember_register(self, registry):
        registry.add("frontend", "params", ParamFrontend())


@pytest.fixture(autouse=True)
def params_frontend():
    reset_plugin_manager()
    get_plugin_manager().register(ParamPlugin(), name="params")
    yield
    reset_plugin_manager()


def layer(x, w, b):
    return torch.relu(x @ w.t() + b) * 2


def _params(requires_grad: bool = False) -> list[torch.Tensor]:
    return [torch.randn(5, 4).requires_grad_(requires_grad), torch.randn(5).requires_grad_(requires_grad)]


def _frozen_events(options: dict, params: list[torch.Tensor], grad: bool = False) -> list:
    x = torch.randn(3, 4)
    with record_events() as rec, torch.set_grad_enabled(grad):
        out = compile(layer, options={"frontend": "params", **options})(x, *params)
        torch.testing.assert_close(out, layer(x, *params))
    return rec.kinds("graph_frozen")


def test_default_freezes_under_no_grad_when_no_parameter_requires_grad():
    [event] = _frozen_events({}, _params())
    assert event.data["frozen"] == 2 and event.data["reason"] == "first call"
    assert len(event.graph.inputs) == 1


def test_default_leaves_parameters_that_require_grad():
    assert _frozen_events({}, _params(requires_grad=True)) == []


def test_default_needs_no_grad_mode():
    assert _frozen_events({}, _params(), grad=True) == []


def test_option_true_freezes_parameters_that_require_grad_under_no_grad():
    assert len(_frozen_events({"freezing": True}, _params(requires_grad=True))) == 1


def test_option_false_turns_it_off():
    assert _frozen_events({"freezing": False}, _params()) == []


def test_training_graph_is_never_frozen():
    assert _frozen_events({"freezing": True}, _params(requires_grad=True), grad=True) == []


def test_parameter_written_in_place_or_replaced_is_refrozen():
    w, b = _params()
    x = torch.randn(3, 4)
    f = compile(layer, options={"frontend": "params"})
    with torch.no_grad(), record_events() as rec:
        f(x, w, b)
        w.add_(1.0)  # as load_state_dict's copy_ or an optimizer step would
        torch.testing.assert_close(f(x, w, b), layer(x, w, b))
        b2 = torch.randn(5)
        torch.testing.assert_close(f(x, w, b2), layer(x, w, b2))
        torch.testing.assert_close(f(x, w, b2), layer(x, w, b2))
    reasons = [e.data["reason"] for e in rec.kinds("graph_frozen")]
    assert reasons[0] == "first call" and "written in place" in reasons[1] and "another tensor" in reasons[2]
    assert len(reasons) == 3


def test_parameters_changing_at_every_call_end_up_unfrozen():
    w, b = _params()
    x = torch.randn(3, 4)
    f = compile(layer, options={"frontend": "params"})
    with torch.no_grad(), record_events() as rec:
        for _ in range(MAX_REFREEZES + 3):
            w.add_(0.5)
            torch.testing.assert_close(f(x, w, b), layer(x, w, b))
    assert len(rec.kinds("graph_frozen")) == MAX_REFREEZES + 1
    assert [e.data["cause"] for e in rec.kinds("fallback")] == ["freezing"]


def test_a_freezing_pass_that_raises_leaves_the_graph_unfrozen(monkeypatch):
    import ember_runtime._frozen_graph as frozen_graph

    def broken(graph, inputs, **options):
        raise RuntimeError("pass bug")

    monkeypatch.setattr(frozen_graph, "freeze", broken)
    w, b = _params()
    x = torch.randn(3, 4)
    with torch.no_grad(), record_events() as rec:
        torch.testing.assert_close(compile(layer, options={"frontend": "params"})(x, w, b), layer(x, w, b))
    [fallback] = rec.kinds("fallback")
    assert fallback.data["cause"] == "freezing" and "pass bug" in fallback.data["reason"]
