"""The frontend conformance kit fails frontends that break the contract (capture's tests run it on real ones)."""

import pytest
from ember_core import from_fx
from ember_core.testing import FrontendConformance
from torch.fx.experimental.proxy_tensor import make_fx


class Eager:
    """A broken frontend: never captures, runs the function as it is."""

    def wrap(self, fn, compile_graph, options):
        return fn


class FirstShapesOnly:
    """A broken frontend: traces the first call and reuses that graph for every later call, whatever the shapes."""

    def wrap(self, fn, compile_graph, options):
        compiled = []

        def run(*args):
            if not compiled:
                compiled.append(compile_graph(from_fx(make_fx(fn)(*args), name="once"), list(args)))
            return compiled[0](list(args))[0]

        return run


class TracesThrough:
    """A broken frontend: records whatever ops run, so a custom autograd function's forward is all it keeps."""

    def wrap(self, fn, compile_graph, options):
        def run(*args):
            graph = from_fx(make_fx(fn)(*args), name="traced")
            return tuple(compile_graph(graph, list(args))(list(args)))

        return run


class NoWrap:
    def backend(self, compile_graph, options):
        return lambda gm, example_inputs: gm


def kit(frontend, **attributes):
    return type("Kit", (FrontendConformance,), {"frontend": frontend, **attributes})()


def test_kit_catches_a_frontend_that_compiles_nothing():
    with pytest.raises(AssertionError, match="softmax: the frontend never called compile_graph"):
        kit(Eager()).test_results_match_eager("softmax")


def test_kit_catches_a_frontend_that_ignores_new_shapes():
    with pytest.raises(AssertionError, match="with dynamic=False, a new input shape compiled no new graph"):
        kit(FirstShapesOnly()).test_new_shapes_compile_again_when_not_dynamic()


def test_kit_catches_a_frontend_that_runs_a_graph_break_eagerly_under_fullgraph():
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        kit(Eager()).test_fullgraph_refuses_a_graph_break()


def test_kit_catches_a_frontend_that_loses_a_custom_functions_backward():
    with pytest.raises(AssertionError, match="gradients 0"):
        kit(TracesThrough()).test_custom_autograd_function_keeps_its_backward()


def test_kit_checks_the_protocols():
    with pytest.raises(AssertionError, match="NoWrap has no wrap"):
        kit(NoWrap()).test_implements_the_frontend_protocol()
    with pytest.raises(AssertionError, match="Eager has no backend"):
        kit(Eager(), backend=True).test_implements_the_frontend_protocol()


def test_kit_without_a_frontend_fails_clearly():
    with pytest.raises(pytest.fail.Exception, match="Kit.frontend is not set"):
        kit(None).test_results_match_eager("softmax")
