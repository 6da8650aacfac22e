"""joint(): layout of the joint graph, and gradients equal to eager through joint → partition → wrap."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _support import Compiled, capture, check_against_eager, leaves
from ember_autograd import joint
from ember_core import Interpreter, Output, Sym, is_random, parse_graph, resolve_op, verify
from ember_core.testing import assert_golden


def rand(*shape: int, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=grad)


def mlp(x, w1, b1, w2, b2):
    return F.gelu(x @ w1 + b1) @ w2 + b2


def mlp_inputs():
    torch.manual_seed(0)
    return rand(4, 8, grad=False), rand(8, 16), rand(16), rand(16, 3), rand(3)


# ---------------------------------------------------------------------------------------------- layout

def test_custom_function_call_is_differentiated_by_its_backward_subgraph():
    """`Gate`'s backward doubles the gradient of its input: a 2 the derivative of its forward does not have."""
    from ember_core.testing import gate_graph

    graph = gate_graph()
    jg = joint(graph, [torch.randn(6, 8, requires_grad=True), torch.randn(8, requires_grad=True)]).graph
    assert not jg.subgraphs and all(n.op != "ember.custom_function.default" for n in jg.nodes)
    backward = [n for n in jg.nodes if n.meta["region"] == "backward"]
    # one 2 from `y * 2` around the call, one from the custom backward (re-deriving the forward has no second)
    assert sum(n.op == "aten.mul.Tensor" and n.args[1:] == (2,) for n in backward) == 2, str(jg)
    assert sum(n.op == "aten.sigmoid.default" for n in backward) == 1  # the backward subgraph's own sigmoid




def test_inputs_are_primals_then_one_tangent_per_differentiable_output():
    def f(x, w):
        y = x @ w
        return y, y.argmax(), y.sum()

    jg = joint(capture(f, rand(3, 4), rand(4, 5)), [rand(3, 4), rand(4, 5)])
    g = jg.graph
    assert (jg.num_primals, jg.num_forward_outputs) == (2, 3)
    assert [i.kind for i in g.inputs] == ["user", "user", "tangent", "tangent"]
    assert [i.name for i in g.inputs[2:]] == ["tangent_0", "tangent_2"]
    assert [g.values[o.name].requires_grad for o in g.outputs[:3]] == [True, False, True]


def test_outputs_are_forward_outputs_then_grads_of_primals():
    jg = joint(capture(mlp, *mlp_inputs()), mlp_inputs())
    grads = jg.graph.outputs[jg.num_forward_outputs:]
    assert [(o.kind, o.input) for o in grads] == [("grad", 1), ("grad", 2), ("grad", 3), ("grad", 4)]
    assert verify(jg.graph) is jg.graph


def test_every_node_is_tagged_forward_or_backward_forward_first():
    jg = joint(capture(mlp, *mlp_inputs()), mlp_inputs())
    regions = [n.meta["region"] for n in jg.graph.nodes]
    assert set(regions) == {"forward", "backward"}
    assert regions == sorted(regions, key=lambda r: r == "backward")


def test_primals_keep_names_kinds_and_metadata():
    args = mlp_inputs()
    graph = capture(mlp, *args, kinds=["user", "param", "param", "param", "param"])
    g = joint(graph, args).graph
    assert [(i.name, i.kind) for i in g.inputs[:5]] == [(i.name, i.kind) for i in graph.inputs]
    assert [g.values[i.name].requires_grad for i in graph.inputs] == [False, True, True, True, True]


def test_graph_is_core_aten_and_functional():
    def f(x):
        y = x * 2
        y.add_(1)
        return F.silu(y).mean()

    g = joint(capture(f, rand(5)), [rand(5)]).graph
    ops = {n.op for n in g.nodes}
    assert "aten.silu.default" not in ops and "aten.silu_backward.default" not in ops
    assert not any(resolve_op(op)._schema.is_mutable for op in ops if op.startswith("aten."))


# ---------------------------------------------------------------------------------------------- against eager


def test_mlp_matches_eager():
    check_against_eager(mlp, *mlp_inputs())


def test_int_input_and_int_output():
    def f(x, idx, n):
        return x[idx] * n.float().sum(), idx * 2 + n.sum()

    c = check_against_eager(f, rand(6), torch.tensor([1, 4]), torch.arange(3))
    assert c.joint.graph.values[c.joint.graph.outputs[1].name].dtype == "int64"


def test_non_differentiable_output_has_no_tangent():
    def f(x):
        y = x.sin()
        return y.argmax(), y * 2

    c = check_against_eager(f, rand(7))
    assert [i.kind for i in c.joint.graph.inputs] == ["user", "tangent"]


def test_several_outputs():
    def f(x, w):
        h = torch.tanh(x @ w)
        m = h.max(1)
        return h.sum(0), m.values, m.indices, torch.cumsum(h, 0)

    check_against_eager(f, rand(4, 5), rand(5, 6))


def test_outputs_aliasing_each_other():
    def f(x):
        y = x * 3
        return y, y.view(-1), y.t(), y

    check_against_eager(f, rand(2, 3))


def test_outputs_aliasing_an_input():
    def f(x, w):
        return x.view(-1), (x * w).sum(), x

    kinds = [Output("", "alias", 0), Output(""), Output("", "alias", 0)]
    c = check_against_eager(f, rand(2, 3), rand(3), outputs=kinds)
    assert [(o.kind, o.input) for o in c.joint.graph.outputs[:3]] == [("alias", 0), ("user", None), ("alias", 0)]


def test_inputs_returned_as_outputs_with_and_without_grad():
    def f(x, buf, idx):
        return x * 2, buf, idx, buf.view(-1), x

    kinds = [Output(""), Output("", "alias", 1), Output("", "alias", 2), Output("", "alias", 1), Output("", "alias", 0)]
    check_against_eager(f, rand(3), torch.randn(3), torch.arange(2), outputs=kinds)


def test_in_place_ops_on_an_intermediate():
    def f(x, w):
        y = x @ w
        y.mul_(2)
        y[0].add_(1)
        y.relu_()
        return y.sum(1)

    check_against_eager(f, rand(4, 5), rand(5, 3))


def test_views():
    def f(x):
        a = x.t()[1:, ::2]
        b = x.unsqueeze(0).expand(3, -1, -1)
        return a.contiguous() * 2, (b * x).sum(0), x.reshape(-1)[3:7]

    check_against_eager(f, rand(4, 6))


def test_detach():
    def f(x, w):
        y = x * w
        return y * y.detach(), y.detach().exp()

    c = check_against_eager(f, rand(5), rand(5))
    assert [i.kind for i in c.joint.graph.inputs].count("tangent") == 1


def test_unused_input_gets_no_grad():
    def f(x, w, unused):
        return (x * 2).sum() + w.shape[0]

    c = check_against_eager(f, rand(3), rand(4), rand(2))
    grads = c.joint.graph.outputs[c.joint.num_forward_outputs:]
    assert [o.input for o in grads] == [0]


def test_graph_constant():
    c = torch.randn(5)

    def f(x):
        return x * c + c.sum()

    check_against_eager(f, rand(5))


def test_dropout_grads_equal_eager_under_the_same_seed():
    def f(x, w):
        h = F.dropout(x @ w, 0.4, True)
        return F.dropout(h.relu(), 0.3, True).sum(0)

    check_against_eager(f, rand(8, 6), rand(6, 5), seed=123)


def test_random_ops_run_once_in_the_forward():
    def f(x):
        return F.dropout(x, 0.5, True).sum() + torch.ops.aten.native_dropout(x, 0.2, True)[0].sum()

    g = joint(capture(f, rand(16)), [rand(16)]).graph
    random = [n for n in g.nodes if is_random(resolve_op(n.op))]
    assert len(random) == 2
    assert {n.meta["region"] for n in random} == {"forward"}


def test_native_dropout_backward_reads_the_forward_mask():
    def f(x):
        return torch.ops.aten.native_dropout(x, 0.5, True)[0] * 3

    g = joint(capture(f, rand(32)), [rand(32)]).graph
    [drop] = [n for n in g.nodes if n.op == "aten.native_dropout.default"]
    mask = drop.outputs[1]
    readers = [n for n in g.nodes if any(getattr(a, "name", None) == mask for a in n.args)]
    assert readers and all(n.meta["region"] == "backward" for n in readers)
    x = rand(32)
    out = Compiled(f, x)(x)[0]
    out.backward(torch.ones(32))
    kept = out != 0  # the forward's mask, read off its output
    assert 0 < kept.sum() < 32
    torch.testing.assert_close(x.grad, kept.float() * 6)
    torch.testing.assert_close(out, x.detach() * x.grad)


def test_mutated_buffer_is_a_forward_output_without_tangent():
    def f(x, w, running):
        return (x @ w).relu(), running * 0.9 + x.detach().mean(0) * 0.1

    args = (rand(4, 3), rand(3, 2), torch.zeros(3))
    kinds = [Output(""), Output("", "mutation", 2)]
    c = check_against_eager(f, *args, kinds=["user", "param", "buffer"], outputs=kinds, mutated=[2])
    g = c.joint.graph
    assert g.inputs[2].mutated and (g.outputs[1].kind, g.outputs[1].input) == ("mutation", 2)
    assert [i.kind for i in g.inputs].count("tangent") == 1


def test_mutated_input_that_requires_grad_carries_its_gradient():
    def f(x):  # x.mul_(2); return x.sin()   as a frontend hands it over
        new_x = x * 2
        return new_x.sin(), new_x

    kinds = [Output(""), Output("", "mutation", 0)]
    a = rand(5)
    compiled = Compiled(f, a * 1, outputs=kinds, mutated=[0])
    a_c, a_e = leaves([a, a])
    x = a_c * 1
    y, new_x = compiled(x)
    x.copy_(new_x)  # what the frontend does with a mutation output
    (y.sum() + 3 * x.sum()).backward()
    x = a_e * 1
    x.mul_(2)
    (x.sin().sum() + 3 * x.sum()).backward()
    torch.testing.assert_close(a_c.grad, a_e.grad)


def test_symbolic_sizes_are_kept_and_work_at_other_sizes():
    def f(x, w):
        return (torch.tanh(x @ w) * x.shape[0]).sum(1)

    x, w = rand(4, 6), rand(6, 3)
    compiled = Compiled(f, x, w, tracing_mode="symbolic")
    assert compiled.joint.graph.symbols == compiled.graph.symbols
    x2, w2 = leaves([rand(7, 2), rand(2, 3)])
    x3, w3 = leaves([x2, w2])
    compiled(x2, w2)[0].sum().backward()
    f(x3, w3).sum().backward()
    torch.testing.assert_close((x2.grad, w2.grad), (x3.grad, w3.grad))


def test_no_grad_region_stops_gradients_when_the_metadata_says_so():
    def f(x, w):
        y = x * w
        with torch.no_grad():
            s = y * 2
        return y + s

    x, w = rand(5), rand(5)
    graph = capture(f, x, w)
    mul, mul_1, add = (n.outputs[0] for n in graph.nodes)
    facts = {x.name: True for x in graph.inputs} | {mul: True, mul_1: False, add: True}
    graph = graph.replace(values={k: v.replace(requires_grad=facts.get(k, False)) for k, v in graph.values.items()})
    check_against_eager(f, x, w, graph=graph)


def test_without_grad_metadata_a_replayed_no_grad_region_is_differentiated():
    def f(x):
        with torch.no_grad():
            s = x * 2
        return x * s

    g = joint(capture(f, rand(3)), [rand(3)]).graph  # make_fx leaves no requires_grad facts
    assert [o.kind for o in g.outputs] == ["user", "grad"]


def test_symbolic_size_arguments_stay_symbolic():
    def f(x, w):
        return (torch.tanh(x @ w) * 2).view(-1, 2)

    x, w = rand(4, 6), rand(6, 4)
    graph = capture(f, x, w, tracing_mode="symbolic")
    s = graph.symbols[0].name
    view = next(n for n in graph.nodes if n.op == "aten.view.default")
    nodes = tuple(n.replace(args=(n.args[0], (Sym(f"{s}*{s}//2"), 2))) if n is view else n for n in graph.nodes)
    compiled = Compiled(f, x, w, graph=verify(graph.replace(nodes=nodes)))
    assert {sym.name for sym in compiled.joint.graph.symbols} == {sym.name for sym in graph.symbols}
    x2, w2 = leaves([rand(6, 3), rand(3, 6)])
    x3, w3 = leaves([x2, w2])
    compiled(x2, w2)[0].sum().backward()
    f(x3, w3).sum().backward()
    torch.testing.assert_close((x2.grad, w2.grad), (x3.grad, w3.grad))


@pytest.mark.gpu
def test_cuda_dropout_is_native_dropout_and_matches_eager():
    def f(x, w):
        return F.dropout(torch.tanh(x @ w), 0.5, True).sum(0)

    x, w = (torch.randn(*s, device="cuda", requires_grad=True) for s in ((64, 32), (32, 16)))
    compiled = check_against_eager(f, x, w, seed=5)
    ops = [n.op for n in compiled.joint.graph.nodes]
    assert ops.count("aten.native_dropout.default") == 1


# ---------------------------------------------------------------------------------------------- printed form

SNAPSHOTS = Path(__file__).parent / "snapshots"


def test_joint_of_an_mlp_prints_as_its_snapshot():
    def mlp_tanh(x, w1, w2):
        return (torch.tanh(x @ w1) @ w2,)

    args = (torch.randn(4, 8), rand(8, 16), rand(16, 3))
    assert_golden(str(joint(capture(mlp_tanh, *args, kinds=["user", "param", "param"]), args).graph),
                  SNAPSHOTS / "joint_mlp.txt")


def test_joint_with_native_dropout_prints_as_its_snapshot():
    def dropout_scale(x):
        return (torch.ops.aten.native_dropout(x, 0.25, True)[0] * 3,)

    assert_golden(str(joint(capture(dropout_scale, rand(8)), [rand(8)]).graph), SNAPSHOTS / "joint_dropout.txt")


def test_functional_copy_is_differentiated_like_copy_():
    graph = parse_graph("""# ember graph v1.0
def g(dst: f64[2, 3], src: f32[3] requires_grad):
  copy: f64[2, 3] requires_grad = aten.copy.default(dst, src)
  return (copy)
""")
    src = torch.randn(3, requires_grad=True)
    traced = joint(graph, [torch.zeros(2, 3, dtype=torch.float64), src])
    tangent = torch.randn(2, 3, dtype=torch.float64)
    out, grad = Interpreter(traced.graph).run([torch.zeros(2, 3, dtype=torch.float64), src.detach(), tangent])
    torch.testing.assert_close(out, src.detach().double().expand(2, 3))
    torch.testing.assert_close(grad, tangent.sum(0).float())


def test_a_strided_copy_passes_its_gradient_on():
    """lerp's decomposition lays its result out as eager's with `prims.copy_strided` (inputs of other layouts, under
    symbolic sizes), which has no autograd formula: the joint trace raised, and so did eager autograd after it
    (training fuzzer, --dynamic, seed 425). It runs as a copy into an empty tensor of that layout."""
    graph = parse_graph("""# ember graph v1.1
# symbols: s0=3 in [2, inf]
def g(s0: sym:i64, x: f32[s0, 4] requires_grad):
  y: f32[s0, 4] requires_grad = aten.mul.Tensor(x, 2)
  z: f32[s0, 4]{1, s0} requires_grad = prims.copy_strided.default(y, [1, s0])
  return (z)
""")
    x = torch.randn(3, 4, requires_grad=True)
    traced = joint(graph, [3, x])
    for rows in (3, 5):
        x = torch.randn(rows, 4)
        tangent = torch.randn(rows, 4)
        out, grad = Interpreter(traced.graph).run([rows, x, tangent])
        torch.testing.assert_close((out, grad), (x * 2, tangent * 2))


def test_an_effectful_op_stays_in_the_forward_region():
    graph = parse_graph("""# ember graph v1.0
def g(x: f32[3, 3] requires_grad):
  getitem, getitem_1: f32[3, 3] requires_grad, i32[] = aten.linalg_cholesky_ex.default(x)
  _linalg_check_errors: none:b8 = aten._linalg_check_errors.default(getitem_1, "linalg.cholesky", is_matrix=True)
  return (getitem)
""")
    traced = joint(graph, [torch.randn(3, 3, requires_grad=True)]).graph
    (check,) = [n for n in traced.nodes if n.op == "aten._linalg_check_errors.default"]
    assert check.meta.get("region", "forward") == "forward"


def test_an_output_that_lost_its_derivative_in_the_trace_is_refused_not_given_zero_gradients():
    # eager made y require grad and y's value depends on x, but nothing in the graph carries the derivative (as
    # with an op whose autograd make_fx cannot follow): a zero gradient would be wrong, so the joint is refused
    from ember_core import GraphError, parse_graph

    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[3] requires_grad):\n"
                        "  d: f32[3] = aten.detach.default(x)\n"
                        "  y: f32[3] requires_grad = aten.mul.Tensor(d, 2)\n"
                        "  return (y)\n")
    with pytest.raises(GraphError, match=r"output 'y' requires grad in eager and its value depends on \['x'\]"):
        joint(graph, [torch.randn(3, requires_grad=True)])


def test_a_backward_that_branches_on_a_number_read_from_a_tensor_is_refused_with_a_reason():
    # take(x, i) with a 0-d index under torch 2.14's Dynamo: select_backward asks the sign of the unbacked index
    # (`u0 < 0`); the trace cannot know it, so the joint is refused (the runtime then runs the graph under eager
    # autograd, with a fallback event) instead of raising torch's GuardOnDataDependentSymNode from the compile
    from ember_core import GraphError

    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[4] requires_grad, i: i64[]):\n"
                        "  _local_scalar_dense: sym:i64 = aten._local_scalar_dense.default(i)\n"
                        "  y: f32[] requires_grad = aten.select.int(x, 0, _local_scalar_dense)\n"
                        "  return (y)\n")
    with pytest.raises(GraphError, match="branches on a number read from a tensor at run time"):
        joint(graph, [torch.randn(4, requires_grad=True), torch.tensor(2)])


RUN_TIME_NUMBER_OPS = {
    "add_alpha": ("f32[3, 4] requires_grad = aten.add.Tensor(x, y, alpha=s)", lambda x, y, s: torch.add(x, y, alpha=s)),
    "rsub_alpha": ("f32[3, 4] requires_grad = aten.rsub.Tensor(x, y, alpha=s)",
                   lambda x, y, s: torch.rsub(x, y, alpha=s)),
    "pow": ("f32[3, 4] requires_grad = aten.pow.Tensor_Scalar(x, s)", lambda x, y, s: torch.pow(x.abs(), s)),
    "scalar_pow": ("f32[3, 4] requires_grad = aten.pow.Scalar(s, x)", lambda x, y, s: torch.pow(s, x)),
    "addmm": ("f32[3, 4] requires_grad = aten.addmm.default(x, y, w, beta=s, alpha=s)",
              lambda x, y, s: torch.addmm(x, y, W, beta=s, alpha=s)),
    "softshrink": ("f32[3, 4] requires_grad = aten.softshrink.default(x, s)",
                   lambda x, y, s: torch.nn.functional.softshrink(x, s)),
    "celu": ("f32[3, 4] requires_grad = aten.celu.default(x, s)", lambda x, y, s: torch.nn.functional.celu(x, s)),
}
# the numbers each op is tried at (eager raises for a negative lambda, a zero alpha)
RUN_TIME_NUMBERS = {"softshrink": (0.5, 1.0, 0.0, 2.5), "celu": (0.5, 1.0, -1.5, 0.05)}
W = torch.randn(4, 4)


@pytest.mark.parametrize("name", sorted(RUN_TIME_NUMBER_OPS))
def test_a_formula_that_asks_about_a_number_read_at_run_time_is_traced_in_a_form_that_does_not(name):
    """add's derivative asks whether alpha is 1, pow's whether the exponent (or the base) is 0, addmm's about beta
    and alpha: with the number read from a tensor at run time (a float Dynamo made an input) the trace could not
    answer, and the graph ran under eager autograd. The joint traces those ops in forms whose formulas ask nothing
    (`x + y * s`, `pow(x, t)` of a 0-d tensor, `where(s == 0, 0, s * c)`); at several values, 0 among them, it
    gives eager's outputs and gradients."""
    node, fn = RUN_TIME_NUMBER_OPS[name]
    text = ("# ember graph v1.1\n"
            "def g(x: f32[3, 4] requires_grad, y: f32[3, 4] requires_grad, t: f64[], w: f32[4, 4]):\n"
            "  s: sym:f64 = aten._local_scalar_dense.default(t)\n"
            f"  out: {node}\n"
            "  return (out)\n")
    if name == "pow":
        text = text.replace("aten.pow.Tensor_Scalar(x, s)", "aten.pow.Tensor_Scalar(a, s)").replace(
            "  out:", "  a: f32[3, 4] requires_grad = aten.abs.default(x)\n  out:")
    graph = parse_graph(text)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    if name == "addmm":
        x[0, 0] = math.inf  # eager's gemm reads nothing of it at beta 0: no NaN comes of it
    if name in ("softshrink", "celu"):
        x[0, :3] = torch.tensor([math.nan, 50.0, -50.0])  # NaN stays NaN; the exponential of 50 / 0.05 is inf
    traced = joint(graph, [x.requires_grad_(), y.requires_grad_(), torch.tensor(0.5, dtype=torch.float64), W])
    for s in RUN_TIME_NUMBERS.get(name, (0.5, 1.0, 0.0, -1.5)):
        tangent = torch.randn(3, 4)
        tangent[0, 0] = math.inf if name == "softshrink" else tangent[0, 0]  # where eager's gradient is 0 anyway
        xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        want = fn(xe, ye, s)
        grads = torch.autograd.grad(want, (xe, ye), tangent, allow_unused=True)
        got = Interpreter(traced.graph).run([x.detach(), y.detach(), torch.tensor(s, dtype=torch.float64), W, tangent])
        expected = [want, *(g for g in grads if g is not None)]
        assert len(got) == len(expected), (name, s)
        for k, (g, e) in enumerate(zip(got, expected)):
            torch.testing.assert_close(g, e, equal_nan=True, msg=lambda m, k=k, s=s: f"s={s}, output {k}: {m}")


@pytest.mark.parametrize("k", [-3, 0, 5])
def test_an_int_input_may_be_negative(k):
    """A `sym` input that is no size of any tensor is an int the program passed (Dynamo makes one of an int argument
    that changed between calls). The trace gave it a positive range, as a size has, and a negative example failed
    ("positive set for negative value"); any int is now traced, and the joint computes with the value it is given."""
    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[4] requires_grad, k: sym:i64):\n"
                        "  y: f32[4] requires_grad = aten.mul.Tensor(x, k)\n"
                        "  return (y)\n")
    x = torch.randn(4, requires_grad=True)
    traced = joint(graph, [x, k])
    tangent = torch.randn(4)
    for value in (k, -7):
        out, grad = Interpreter(traced.graph).run([x.detach(), value, tangent])
        torch.testing.assert_close((out, grad), (x.detach() * value, tangent * value))


def test_a_backward_that_fixes_a_symbol_asks_for_a_graph_per_value():
    """cumprod's backward reads the scanned dim's size as an int, which replaces symbol s1 by its traced value in
    the trace: the joint is right at that value only. It says so (`SpecializationNeeded`, with the value); the graph
    with s1 replaced by it (`specialize_symbols`) traces, keeps s0 symbolic, and computes eager's gradient."""
    from ember_core import SpecializationNeeded, specialize_symbols

    graph = parse_graph("# ember graph v1.1\n"
                        "# symbols: s0=3 in [2, inf], s1=5 in [2, inf]\n"
                        "def g(s0: sym:i64, s1: sym:i64, x: f32[s0, s1] requires_grad):\n"
                        "  y: f32[s0, s1] requires_grad = aten.cumprod.default(x, 1)\n"
                        "  return (y)\n")
    x = torch.randn(3, 5, requires_grad=True)
    with pytest.raises(SpecializationNeeded, match="fixed s1 = 5") as raised:
        joint(graph, [3, 5, x])
    assert raised.value.values == {"s1": 5}
    traced = joint(specialize_symbols(graph, raised.value.values), [3, 5, x])
    assert [s.name for s in traced.graph.symbols] == ["s0"]
    for rows in (3, 4):
        x = torch.randn(rows, 5, requires_grad=True)
        tangent = torch.randn(rows, 5)
        out, grad = Interpreter(traced.graph).run([rows, 5, x.detach(), tangent])
        expected = x.cumprod(1)
        torch.testing.assert_close((out, grad), (expected, torch.autograd.grad(expected, x, tangent)[0]))


def test_an_op_fake_tensors_cannot_run_is_refused_with_a_reason(monkeypatch):
    # FakeTensor refuses an ATen op without a Meta kernel (UnsupportedOperatorException). Escaping the backend, Dynamo
    # turns that into a graph break that runs the graph eagerly, without ember's fallback event; as a GraphError the
    # runtime runs the graph under eager autograd and reports it. Here multi_margin_loss reaches ATen's autograd
    # (ember's trace kernel withheld), whose formula calls multi_margin_loss_backward, which has no Meta kernel
    import ember_core.execution._tracing as tracing
    from ember_core import GraphError

    monkeypatch.setattr(tracing, "TRACE_KERNELS", {"aten.multi_margin_loss.default": None})
    graph = parse_graph("# ember graph v1.1\n"
                        "# symbols: s0=3 in [2, inf]\n"  # a symbolic size: no real-kernel fallback on zeros
                        "def g(x: f32[s0, 4] requires_grad, t: i64[s0], s0: sym:i64):\n"
                        "  y: f32[] requires_grad = aten.multi_margin_loss.default(x, t)\n"
                        "  return (y)\n")
    with pytest.raises(GraphError, match="fake tensors cannot run aten.multi_margin_loss_backward"):
        joint(graph, [torch.randn(3, 4, requires_grad=True), torch.tensor([0, 2, 1]), 3])


def test_prims_convert_element_type_is_differentiated_as_a_cast():
    # torch's bfloat16 decompositions (renorm's) leave prims.convert_element_type, which has no autograd formula
    import torch._prims  # noqa: F401 - registers the prims namespace

    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: bf16[4] requires_grad):\n"
                        "  y: f32[4] requires_grad = prims.convert_element_type.default(x, f32)\n"
                        "  z: f32[4] requires_grad = aten.mul.Tensor(y, y)\n"
                        "  return (z)\n")
    joint_graph = joint(graph, [torch.randn(4).bfloat16().requires_grad_()])
    assert [o.kind for o in joint_graph.graph.outputs] == ["user", "grad"]


# ---------------------------------------------------------------------------------------------- source lines


def test_every_node_carries_the_source_of_the_captured_node_it_comes_from():
    """The joint trace dropped node meta: backward kernels had no source lines in the report. Now each node the
    forward of captured node N records, and each node N's backward records, carries N's `source` and `module`."""
    def f(x, w):
        return (x.sin() * w).sum()

    x, w = rand(4, 8), rand(8)
    graph = capture(f, x, w)
    located = graph.replace(nodes=tuple(n.replace(meta={**n.meta, "source": f"model.py:{10 + i}", "module": f"m{i}"})
                                        for i, n in enumerate(graph.nodes)))
    where = {n.op: (n.meta["source"], n.meta["module"]) for n in located.nodes}
    jg = joint(located, [x, w]).graph
    assert all((n.meta.get("source"), n.meta.get("module")) in where.values() for n in jg.nodes), str(jg)
    backward = [n for n in jg.nodes if n.meta["region"] == "backward"]
    by_op: dict[str, set] = {}
    for n in backward:
        by_op.setdefault(n.op, set()).add((n.meta["source"], n.meta["module"]))
    assert by_op["aten.cos.default"] == {where["aten.sin.default"]}  # sin's derivative, from sin's line
    assert by_op["aten.expand.default"] == {where["aten.sum.default"]}  # sum's, from sum's
    assert by_op["aten.mul.Tensor"] == {where["aten.mul.Tensor"], where["aten.sin.default"]}  # mul's two; cos * g
    forward = [n for n in jg.nodes if n.meta["region"] == "forward"]
    lines = [int(n.meta["source"].split(":")[1]) for n in forward]
    assert lines == sorted(lines) and {(n.meta["source"], n.meta["module"]) for n in forward} == set(where.values())
    assert {(n.meta["source"], n.meta["module"]) for n in forward if n.op.startswith("aten.sum")} == {
        where["aten.sum.default"]}


def test_the_forward_nodes_of_a_checkpointed_node_carry_its_marks_and_the_backward_nodes_do_not():
    """Activation checkpointing's marks (`checkpoint`, `checkpoint_policy`) go where the partitioner reads them:
    to every node the forward of a marked captured node records (layer norm's decomposition included), not to the
    backward's nodes, which run in the backward anyway."""
    def f(x, w):
        return F.layer_norm(x * w, (8,)).sin().sum()

    x, w = rand(4, 8), rand(8)
    graph = capture(f, x, w)
    marks = {"checkpoint": "7", "checkpoint_policy": "prefer_recompute"}
    marked = graph.replace(nodes=tuple(n.replace(meta={**n.meta, **marks}) if n.op != "aten.sum.default" else n
                                       for n in graph.nodes))
    jg = joint(marked, [x, w]).graph
    forward = [n for n in jg.nodes if n.meta["region"] == "forward"]
    backward = [n for n in jg.nodes if n.meta["region"] == "backward"]
    assert {n.op for n in forward if n.meta.get("checkpoint") == "7"} >= {"aten.mul.Tensor", "aten.sin.default"}
    assert all(n.meta.get("checkpoint_policy") == "prefer_recompute" for n in forward
               if not n.op.startswith("aten.sum")), str(jg)
    assert [n.op for n in forward if n.op.startswith("aten.sum")] and not [
        n for n in forward if n.op.startswith("aten.sum") and "checkpoint" in n.meta]
    assert backward and not [n for n in backward if "checkpoint" in n.meta or "checkpoint_policy" in n.meta]


def test_a_graph_without_source_lines_gets_none():
    x, w = rand(4, 8), rand(8)
    jg = joint(capture(lambda x, w: (x.sin() * w).sum(), x, w), [x, w]).graph
    assert not [n for n in jg.nodes if "source" in n.meta or "module" in n.meta]


def test_an_op_given_a_list_of_symbolic_sizes_runs_on_the_fake_primals():
    """`F.pad` by an amount computed from a symbolic size is `constant_pad_nd(x, [0, s1 - (s1 + 1) // 2])`. The
    probe run that finds the differentiable outputs called ATen's C++ kernel of it, which needs concrete integers
    ("SymIntArrayRef expected to contain only concrete integers"), and every dynamic-shape training graph with such
    an op failed to compile; it now dispatches as the joint trace does, through the Python dispatcher."""
    def f(x):
        n = x.shape[1]
        return F.pad(x[:, ::2], (0, n - (n + 1) // 2)).sin()

    compiled = Compiled(f, rand(3, 7), tracing_mode="symbolic")
    assert "aten.constant_pad_nd.default" in {n.op for n in compiled.joint.graph.nodes}
    for shape in ((3, 7), (5, 10)):
        x = rand(*shape)
        [x2] = leaves([x])
        [out] = compiled(x2)
        out.backward(out.detach() + 1)
        eager = f(x)
        eager.backward(eager.detach() + 1)
        torch.testing.assert_close((out, x2.grad), (eager, x.grad))


def test_int_inputs_named_like_the_trace_names_other_symbols_keep_their_own():
    """The trace's ShapeEnv names its symbols by a hash of their source: graph's `s2` came out of it as `s6`, while
    the graph had an int input `s6` of its own (conv2d's strides and padding, recompiled with dynamic=True). The
    placeholders had the graph's names and the sizes the trace's, so mapping the trace's names back renamed the
    input `s6` to `s2`: 'value s2 is defined twice', and the graph's backward ran eagerly. Every input keeps its
    name and every size its symbol, whatever the trace called them."""
    names = [f"s{k}" for k in range(12)]
    header = ", ".join(f"{n}=3 in [2, inf]" for n in names[:3])
    graph = parse_graph("# ember graph v1.1\n"
                        f"# symbols: {header}\n"
                        f"def g(s0: sym:i64, s1: sym:i64, s2: sym:i64, x: f32[s0, s1, s2] requires_grad, "
                        + ", ".join(f"{n}: sym:i64" for n in names[3:]) + "):\n"
                        "  y: f32[s0, s1, s2] requires_grad = aten.mul.Tensor(x, s11)\n"
                        "  return (y)\n")
    x = torch.randn(3, 3, 3, requires_grad=True)
    ints = list(range(4, 4 + len(names) - 3))
    traced = joint(graph, [3, 3, 3, x, *ints])
    assert [i.name for i in traced.graph.inputs][:len(graph.inputs)] == [i.name for i in graph.inputs]
    assert traced.graph.values["x"].shape == ("s0", "s1", "s2")
    for shape, k in (((3, 3, 3), ints[-1]), ((2, 4, 5), -2)):
        x = torch.randn(*shape)
        tangent = torch.randn(*shape)
        out, grad = Interpreter(traced.graph).run([*shape, x, *ints[:-1], k, tangent])
        torch.testing.assert_close((out, grad), (x * k, tangent * k))


def test_a_backward_that_compares_an_int_input_in_cpp_asks_for_a_graph_per_value():
    """pow's backward (C++) asks whether the exponent is 0; with the exponent a symbolic int input ATen raised
    'NYI SymInt equality' out of the trace, and compiling the graph failed (torch.compile's own AOT autograd fails
    the same way). It says `SpecializationNeeded` for the int inputs instead; at a value the joint traces."""
    from ember_core import SpecializationNeeded, specialize_symbols

    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[4] requires_grad, k: sym:i64):\n"
                        "  y: f32[4] requires_grad = aten.pow.Tensor_Scalar(x, k)\n"
                        "  return (y)\n")
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(SpecializationNeeded, match="compares an int input with a number") as raised:
        joint(graph, [x, 3])
    assert raised.value.values == {"k": 3}
    traced = joint(specialize_symbols(graph, raised.value.values), [x, 3])
    tangent = torch.randn(4)
    out, grad = Interpreter(traced.graph).run([x.detach(), 3, tangent])
    expected = x.pow(3)
    torch.testing.assert_close((out, grad), (expected, torch.autograd.grad(expected, x, tangent)[0]))
