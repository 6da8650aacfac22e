"""What a compiled function reads besides its arguments, and arguments that alias each other, through both frontends.

Every case changes something the first call's graph could have baked in (a global, a closure cell, a module in a
global list, an attribute, the aliasing of two arguments) and checks the next call against eager. Tensors read
from globals and closures are graph inputs in the trace frontend: changing them must not compile again.
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import textwrap
import types

import ember
import ember_runtime
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close


@pytest.fixture(autouse=True)
def cold_graph_cache():
    """Each test compiles what it counts: no build reused from another test."""
    ember_runtime.clear_cache()


def compile_with(frontend, fn, **kwargs):
    return ember.compile(fn, options={"frontend": frontend}, **kwargs)


def count(rec, kind):
    return len([e for e in rec.events if e.kind == kind])


def assert_no_fallback(rec):
    reasons = [e.message for e in rec.events if e.kind == "fallback"]
    assert not reasons, reasons


# ---------------------------------------------------------------------------------------------- Python scalars

SCALE = 1.0
POWER = 2
USE_RELU = True
MODE = "tanh"
OFFSET = None


def softmax_scaled(x):
    return torch.softmax(x * SCALE, -1)


def test_global_float_changed_between_calls(frontend, monkeypatch):
    compiled = compile_with(frontend, softmax_scaled)
    x = torch.randn(4, 8)
    with ember.record_events() as rec:
        for scale in (1.0, 3.0, 0.5, 3.0, 2, 0.25):  # a changed float becomes an input; an int is specialized
            monkeypatch.setitem(globals(), "SCALE", scale)
            assert_close(compiled(x), softmax_scaled(x))
    assert count(rec, "graph_compiled") <= 4


def scalars_of_each_kind(x):
    y = x.pow(POWER)
    y = y.relu() if USE_RELU else y.sigmoid()
    y = y.tanh() if MODE == "tanh" else y.cos()
    return y if OFFSET is None else y + OFFSET


@pytest.mark.parametrize("name, value", [("POWER", 3), ("USE_RELU", False), ("MODE", "cos"), ("OFFSET", 2.5)])
def test_global_int_bool_str_none_changed(frontend, monkeypatch, name, value):
    compiled = compile_with(frontend, scalars_of_each_kind)
    x = torch.randn(6)
    assert_close(compiled(x), scalars_of_each_kind(x))
    monkeypatch.setitem(globals(), name, value)
    assert_close(compiled(x), scalars_of_each_kind(x))


def test_unchanged_global_scalar_compiles_once(frontend):
    compiled = compile_with(frontend, softmax_scaled)
    x = torch.randn(4, 8)
    with ember.record_events() as rec:
        for _ in range(4):
            assert_close(compiled(x), softmax_scaled(x))
    assert count(rec, "graph_compiled") == 1


def test_closure_scalar_changed_between_calls(frontend):
    scale = 2.0

    def f(x):
        return x * scale + 1

    def set_scale(v):
        nonlocal scale
        scale = v

    compiled = compile_with(frontend, f)
    x = torch.randn(5)
    assert_close(compiled(x), f(x))
    set_scale(-4.0)
    assert_close(compiled(x), f(x))


def _scaled_by_global(x):
    return x * SCALE


def calls_a_helper(x):
    return _scaled_by_global(x).sin()


def test_global_read_by_a_called_helper(frontend, monkeypatch):
    compiled = compile_with(frontend, calls_a_helper)
    x = torch.randn(5)
    assert_close(compiled(x), calls_a_helper(x))
    monkeypatch.setitem(globals(), "SCALE", 7.0)
    assert_close(compiled(x), calls_a_helper(x))


ACTIVATION = torch.relu


def applies_global_function(x):
    return ACTIVATION(x) * 2


def test_global_function_rebound(frontend, monkeypatch):
    compiled = compile_with(frontend, applies_global_function)
    x = torch.randn(7)
    assert_close(compiled(x), applies_global_function(x))
    monkeypatch.setitem(globals(), "ACTIVATION", torch.tanh)
    assert_close(compiled(x), applies_global_function(x))


CONFIG = types.SimpleNamespace(scale=2.0, shift=1)


def reads_config_attributes(x):
    return x * CONFIG.scale + CONFIG.shift


def test_attribute_of_a_global_object_changed(frontend, monkeypatch):
    compiled = compile_with(frontend, reads_config_attributes)
    x = torch.randn(3)
    assert_close(compiled(x), reads_config_attributes(x))
    monkeypatch.setattr(CONFIG, "scale", -1.5)
    assert_close(compiled(x), reads_config_attributes(x))


TEMPERATURE = 2.0


TORCH_MODULE_ATTRIBUTES = {  # a torch module, the attribute its forward reads, a new value
    "leaky_relu_slope": (lambda: nn.LeakyReLU(0.1), "negative_slope", 0.5),
    "layer_norm_eps": (lambda: nn.LayerNorm(8), "eps", 10.0),
    "dropout_p": (lambda: nn.Dropout(0.5), "p", 0.0),
    "softmax_dim": (lambda: nn.Softmax(dim=1), "dim", 0),
    "conv_padding": (lambda: nn.Conv1d(8, 8, 3, padding=1), "padding", (2,)),
}


@pytest.mark.parametrize("name", sorted(TORCH_MODULE_ATTRIBUTES))
def test_attribute_of_a_torch_module_changed(frontend, name):
    """The walk does not enter torch's code, so the attributes a torch module's forward reads (LeakyReLU's slope,
    LayerNorm's eps, Dropout's p) were guarded by nothing: the trace frontend kept the old value, silently. Every
    public scalar attribute of a module from outside the user's code is guarded by value."""
    make, attr, value = TORCH_MODULE_ATTRIBUTES[name]
    torch.manual_seed(0)
    model = nn.Sequential(make()) if name == "conv_padding" else nn.Sequential(nn.Linear(8, 8), make())
    x = torch.randn(2, 8, 8) if name == "conv_padding" else torch.randn(4, 8)
    compiled = compile_with(frontend, model)
    with ember.record_events() as rec:
        for _ in range(2):
            torch.manual_seed(1)
            got = compiled(x)
            torch.manual_seed(1)
            assert_close(got, model(x))
            setattr(model[-1], attr, value)
    # A slope Dynamo makes an input (a symbolic float) is lowered like a number, not left to the interpreter.
    assert not [e.message for e in rec.kinds("fallback") if e.get("cause") == "lowering"]


class ScaledSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.bias = 0.5

    def forward(self, x):
        return torch.softmax(self.proj(x) / TEMPERATURE + self.bias, -1)


def test_module_forward_reads_a_global_and_an_attribute(frontend, monkeypatch):
    model = ScaledSoftmax()
    compiled = compile_with(frontend, model)
    x = torch.randn(3, 8)
    assert_close(compiled(x), model(x))
    monkeypatch.setitem(globals(), "TEMPERATURE", 0.25)
    assert_close(compiled(x), model(x))
    model.bias = -3.0
    assert_close(compiled(x), model(x))


class Limits:
    LOW = -1.0


GAINS = {"a": 1.0, "b": 2.0}


def clamps_and_sums_gains(x):
    y = x.clamp(min=Limits.LOW)
    for key, gain in GAINS.items():
        y = y + gain * (x if key == "a" else x.sin())
    return y


def test_class_constant_and_dict_of_scalars_changed(frontend, monkeypatch):
    compiled = compile_with(frontend, clamps_and_sums_gains)
    x = torch.randn(6) * 3
    assert_close(compiled(x), clamps_and_sums_gains(x))
    monkeypatch.setattr(Limits, "LOW", 0.5)
    assert_close(compiled(x), clamps_and_sums_gains(x))
    monkeypatch.setitem(GAINS, "b", -3.0)
    assert_close(compiled(x), clamps_and_sums_gains(x))
    monkeypatch.setitem(GAINS, "c", 1.0)
    assert_close(compiled(x), clamps_and_sums_gains(x))


class Rounding(enum.Enum):
    FLOOR = "floor"
    CEIL = "ceil"


class Quantizer:
    MODE = Rounding.FLOOR
    STEP = 0.25


def quantizes(x):
    scaled = x / Quantizer.STEP
    return (scaled.floor() if Quantizer.MODE is Rounding.FLOOR else scaled.ceil()) * Quantizer.STEP


def test_enum_and_number_class_constants_changed(frontend, monkeypatch):
    """torch 2.11's Dynamo builds a class's numbers and enum members without a guard (pytorch#176851): the compiled
    function kept the first values, without an error; ember's dynamo frontend guards them (`prepare_dynamo`)."""
    compiled = compile_with(frontend, quantizes)
    x = torch.linspace(-1, 1, 9) + 0.1
    assert_close(compiled(x), quantizes(x))
    monkeypatch.setattr(Quantizer, "MODE", Rounding.CEIL)
    assert_close(compiled(x), quantizes(x))
    monkeypatch.setattr(Quantizer, "STEP", 0.5)
    assert_close(compiled(x), quantizes(x))


def test_torch_compile_with_backend_ember_guards_class_constants_from_its_first_frame(tmp_path):
    """`torch.compile(f, backend="ember")` never calls ember before Dynamo traces f's first frame: the entry point
    torch loads for the name puts the frontend's fixes in first. In a fresh process, where nothing else did."""
    program = textwrap.dedent("""
        import torch
        from torch.testing import assert_close
        class Limits:
            LOW = -1.0
        def f(x):
            return x.clamp(min=Limits.LOW) * 2
        compiled = torch.compile(f, backend="ember")
        x = torch.linspace(-3, 3, 7)
        assert_close(compiled(x), f(x))
        Limits.LOW = 0.5
        assert_close(compiled(x), f(x))
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_closure_over_a_helper_that_closes_over_a_scalar(frontend):
    def make(scale):
        def helper(x):
            return x * scale

        def f(x):
            return helper(x).exp()

        def set_scale(v):
            nonlocal scale
            scale = v

        return f, set_scale

    f, set_scale = make(0.5)
    compiled = compile_with(frontend, f)
    x = torch.randn(4)
    assert_close(compiled(x), f(x))
    set_scale(-2.0)
    assert_close(compiled(x), f(x))


class PlainListOfLayers(nn.Module):
    """Layers in a plain list attribute: not submodules, so not in named_parameters()."""

    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]
        self.mask = torch.ones(4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) * self.mask
        return x


def test_modules_and_tensors_in_plain_attributes(frontend):
    model = PlainListOfLayers()
    compiled = compile_with(frontend, model)
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert_close(compiled(x), model(x))
        model.mask[1] = 0.0
        assert_close(compiled(x), model(x))
        model.layers[0] = nn.Linear(4, 4)
        assert_close(compiled(x), model(x))
        model.mask = torch.full((4,), 2.0)
        assert_close(compiled(x), model(x))


# ---------------------------------------------------------------------------------------------- tensors

WEIGHT = torch.arange(4.0)


def times_global_weight(x):
    return x * WEIGHT + 1


def test_global_tensor_updated_in_place_and_rebound(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "WEIGHT", torch.arange(4.0))
    compiled = compile_with(frontend, times_global_weight)
    x = torch.randn(4)
    with ember.record_events() as rec:
        assert_close(compiled(x), times_global_weight(x))
        WEIGHT.mul_(3)
        assert_close(compiled(x), times_global_weight(x))
        for k in range(3):
            monkeypatch.setitem(globals(), "WEIGHT", torch.full((4,), float(k)))
            assert_close(compiled(x), times_global_weight(x))
            assert_close(compiled(x), times_global_weight(x))
    assert_no_fallback(rec)
    if frontend == "trace":  # a graph input: new values and new tensors alike reuse the graph
        assert count(rec, "graph_compiled") == 1
    else:
        assert count(rec, "graph_compiled") <= 4


def test_global_tensor_with_new_shape_recompiles(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "WEIGHT", torch.arange(4.0))
    compiled = compile_with(frontend, times_global_weight)
    assert_close(compiled(torch.ones(4)), times_global_weight(torch.ones(4)))
    monkeypatch.setitem(globals(), "WEIGHT", torch.arange(3.0))
    assert_close(compiled(torch.ones(3)), times_global_weight(torch.ones(3)))


def test_closure_tensor_updated_in_place_and_rebound(frontend):
    w = torch.randn(5)

    def f(x):
        return (x + w).relu()

    def rebind(v):
        nonlocal w
        w = v

    compiled = compile_with(frontend, f)
    x = torch.randn(5)
    with ember.record_events() as rec:
        assert_close(compiled(x), f(x))
        w.add_(10)
        assert_close(compiled(x), f(x))
        rebind(torch.randn(5))
        assert_close(compiled(x), f(x))
        assert_close(compiled(x), f(x))
    assert_no_fallback(rec)
    if frontend == "trace":
        assert count(rec, "graph_compiled") == 1


GLOBAL_PARAM = nn.Parameter(torch.randn(3, 3))


def uses_global_parameter(x):
    return (x @ GLOBAL_PARAM).tanh().sum()


def test_global_parameter_gets_its_gradient(frontend):
    compiled = compile_with(frontend, uses_global_parameter)
    x = torch.randn(2, 3)
    with ember.record_events() as rec:
        GLOBAL_PARAM.grad = None
        compiled(x).backward()
        got = GLOBAL_PARAM.grad.clone()
    GLOBAL_PARAM.grad = None
    uses_global_parameter(x).backward()
    assert_close(got, GLOBAL_PARAM.grad)
    assert_no_fallback(rec)
    GLOBAL_PARAM.grad = None


COUNTS = torch.zeros(3)


def counts_calls(x):
    COUNTS.add_(1)
    return x + COUNTS


def test_global_tensor_mutated_by_the_function(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "COUNTS", torch.zeros(3))
    compiled = compile_with(frontend, counts_calls)
    x = torch.randn(3)
    for k in range(1, 4):
        assert_close(compiled(x), x + k)
    assert_close(COUNTS, torch.full((3,), 3.0))


# ---------------------------------------------------------------------------------------------- modules in containers

def _linears(n=2, seed=0):
    torch.manual_seed(seed)
    return [nn.Linear(4, 4) for _ in range(n)]


LAYERS = _linears()


def through_global_layers(x):
    for layer in LAYERS:
        x = torch.relu(layer(x))
    return x


def test_modules_in_a_global_list_are_read_live(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "LAYERS", _linears())
    compiled = compile_with(frontend, through_global_layers)
    x = torch.randn(3, 4)
    with ember.record_events() as rec:
        assert_close(compiled(x), through_global_layers(x))
        with torch.no_grad():
            LAYERS[0].weight.mul_(-2)
        assert_close(compiled(x), through_global_layers(x))
        LAYERS[1] = nn.Linear(4, 4)
        assert_close(compiled(x), through_global_layers(x))
        LAYERS.append(nn.Linear(4, 4))
        assert_close(compiled(x), through_global_layers(x))
    assert_no_fallback(rec)


def test_modules_in_a_global_list_train(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "LAYERS", _linears())
    compiled = compile_with(frontend, through_global_layers)
    x = torch.randn(3, 4)
    compiled(x).square().sum().backward()
    got = [p.grad.clone() for layer in LAYERS for p in layer.parameters()]
    for layer in LAYERS:
        layer.zero_grad(set_to_none=True)
    through_global_layers(x).square().sum().backward()
    for g, layer_param in zip(got, [p for layer in LAYERS for p in layer.parameters()]):
        assert_close(g, layer_param.grad)


HEADS = {"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)}


def through_global_dict(x):
    return HEADS["a"](x) - HEADS["b"](x)


def test_modules_in_a_global_dict_are_read_live(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "HEADS", {"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)})
    compiled = compile_with(frontend, through_global_dict)
    x = torch.randn(3, 4)
    with ember.record_events() as rec:
        assert_close(compiled(x), through_global_dict(x))
        HEADS["b"] = nn.Linear(4, 2)
        assert_close(compiled(x), through_global_dict(x))
    assert_no_fallback(rec)


PARAMS = [nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(4))]


def through_global_params(x):
    return x * PARAMS[0] + PARAMS[1]


def test_parameters_in_a_global_list(frontend, monkeypatch):
    monkeypatch.setitem(globals(), "PARAMS", [nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(4))])
    compiled = compile_with(frontend, through_global_params)
    x = torch.randn(2, 4)
    with ember.record_events() as rec:
        assert_close(compiled(x), through_global_params(x))
        with torch.no_grad():
            PARAMS[1].add_(5)
        assert_close(compiled(x), through_global_params(x))
        PARAMS[0] = nn.Parameter(torch.randn(4))
        out = compiled(x)
        assert_close(out, through_global_params(x))
        out.sum().backward()
    assert_close(PARAMS[0].grad, x.sum(0))
    assert_no_fallback(rec)


# ---------------------------------------------------------------------------------------------- aliasing arguments

def add_then_double(a, b):
    a.add_(1)
    return b * 2


def _eager_and_compiled(fn, compiled, make):
    """fn and compiled on two copies of the same arguments: outputs and written tensors compared."""
    eager_args, ember_args = make(), make()
    assert_close(compiled(*ember_args), fn(*eager_args))
    for e, c in zip(eager_args, ember_args):
        assert_close(c, e)


def _same_twice():
    x = torch.arange(6.0)
    return x, x


def _distinct():
    return torch.arange(6.0), torch.arange(6.0)


def _view_of_first():
    x = torch.arange(6.0)
    return x, x.view(2, 3)


def _overlapping_slices():
    x = torch.arange(8.0)
    return x[:6], x[2:]


@pytest.mark.parametrize("make", [_same_twice, _view_of_first, _overlapping_slices],
                         ids=["same", "view", "overlapping"])
def test_aliased_arguments_with_a_mutation(frontend, make):
    compiled = compile_with(frontend, add_then_double)
    _eager_and_compiled(add_then_double, compiled, make)


def test_aliasing_pattern_changes_between_calls(frontend):
    compiled = compile_with(frontend, add_then_double)
    for make in (_distinct, _same_twice, _distinct, _view_of_first, _same_twice, _overlapping_slices):
        _eager_and_compiled(add_then_double, compiled, make)


def test_same_tensor_twice_without_mutation(frontend):
    def f(a, b):
        return a * b + a.sum()

    compiled = compile_with(frontend, f)
    x = torch.randn(5)
    assert_close(compiled(x, x), f(x, x))
    assert_close(compiled(x, torch.ones(5)), f(x, torch.ones(5)))


def test_mutation_through_the_second_alias(frontend):
    def f(a, b):
        b.mul_(3)
        return a + 1

    compiled = compile_with(frontend, f)
    _eager_and_compiled(f, compiled, _view_of_first)
    _eager_and_compiled(f, compiled, _same_twice)


def test_same_tensor_twice_with_grad(frontend):
    def f(a, b):
        return (a * b).sum()

    w = torch.randn(4, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    compile_with(frontend, f)(w, w).backward()
    f(w_ref, w_ref).backward()
    assert_close(w.grad, w_ref.grad)


def test_argument_that_is_also_a_global_tensor(frontend, monkeypatch, request):
    if frontend == "dynamo":  # torch.compile(backend="eager") gets it wrong too
        request.applymarker(pytest.mark.xfail(strict=True, reason="Dynamo dedups an argument that is also a global "
                                              "but guards nothing between a local and a global source"))
    monkeypatch.setitem(globals(), "WEIGHT", torch.arange(4.0))

    def f(a):
        a.add_(1)
        return a * WEIGHT

    compiled = compile_with(frontend, f)
    x = torch.ones(4)
    eager_w = torch.arange(4.0)
    expected = (eager_w + 1) * (eager_w + 1)
    assert_close(compiled(WEIGHT), expected)
    assert_close(WEIGHT, eager_w + 1)
    assert_close(compiled(x), torch.full((4,), 2.0) * WEIGHT)


def test_aliased_arguments_functional_form_matches(frontend):
    def f(a, b):
        a.add_(1)
        return F.relu(b).sum(0)

    compiled = compile_with(frontend, f)
    _eager_and_compiled(f, compiled, _view_of_first)
