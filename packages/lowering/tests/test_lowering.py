"""The lowering walk: extern fallback, outputs (aliases, inputs, symbols), symbolic floats, dead nodes, events."""

import logging
import math

import ember_lowering
import pytest
import torch
from ember_core import Graph, Input, Node, Output, Ref, Value, parse_graph
from ember_lowering import (
    Decision,
    Extern,
    Item,
    LoweringError,
    bind_args,
    lower,
    lower_graph,
    lowering_rules,
    run_plan,
)
from lowering_checks import check, trace


def test_an_op_without_a_rule_becomes_an_extern_call(caplog):
    assert "aten.cumsum.default" not in lowering_rules
    with caplog.at_level(logging.DEBUG, logger="ember.kernels"):
        plan = check(lambda x: (torch.cumsum(x.exp(), 1) + 1), torch.randn(4, 5))
    (ext,) = plan.externs
    assert ext.op == "aten.cumsum.default" and "no lowering rule" in caplog.text
    assert len(plan.kernels) == 2


def test_a_custom_function_call_is_refused_not_made_an_extern_call():
    """An extern call would run the op's forward alone: its backward subgraph would be lost."""
    from ember_core.testing import gate_graph
    from ember_lowering import LoweringError

    with pytest.raises(LoweringError, match="custom autograd function call has no kernel"):
        lower_graph(gate_graph())


def test_matmul_convolution_and_attention_run_extern():
    q = torch.randn(1, 2, 4, 8)
    plan = check(lambda q, w: (q @ q.transpose(-1, -2), torch.nn.functional.conv2d(q, w),
                               torch.nn.functional.scaled_dot_product_attention(q, q, q)), q, torch.randn(3, 2, 3, 3))
    ops = {e.op for e in plan.externs}
    assert "aten.convolution.default" in ops and "aten.bmm.default" in ops


def test_unsupported_dtypes_run_extern():
    z = torch.randn(3, 4, dtype=torch.complex64)
    plan = check(lambda z: (z * 2, (z.abs() + 1)), z)
    assert {e.op for e in plan.externs} >= {"aten.mul.Tensor", "aten.abs.default"}


def test_a_rule_that_refuses_leaves_no_trace(monkeypatch):
    from ember_lowering import Unsupported

    def refuse(ctx, node, a):
        ctx.pointwise(lambda b, v: v, [ctx.tensor(a["self"])], ctx.shape_of(node.outputs[0]), "float32")
        raise Unsupported("not today")
    monkeypatch.setitem(lowering_rules, "aten.sin.default", refuse)
    plan = check(lambda x: x.sin() * 2, torch.randn(3))
    assert [e.op for e in plan.externs] == ["aten.sin.default"]
    assert len(plan.kernels) == 1


def test_outputs_that_are_inputs_or_views_of_inputs_alias_them():
    x = torch.randn(4, 6)
    graph = trace(lambda x: (x, x.t(), x[1:, 2]), x)
    plan = lower(graph, check=True, emit_event=False)
    out, t, sl = run_plan(plan, [x])
    assert out is x and t.data_ptr() == x.data_ptr() and sl.data_ptr() == x[1:, 2].data_ptr()
    assert not plan.steps


def test_output_strides_follow_the_graph():
    x = torch.randn(4, 6)
    graph = trace(lambda x: (x.t() * 2, x.permute(1, 0).contiguous()), x)
    first, second = run_plan(lower(graph, check=True, emit_event=False), [x])
    assert first.stride() == (x.t() * 2).stride() and second.stride() == (1, 6)[::-1] or second.is_contiguous()


def test_an_output_view_has_the_graphs_strides_at_its_size_one_dims():
    # a (1, 16) matmul result viewed as (1, 1, 16): the view's index arithmetic gives stride 0 to the size-1
    # dims, eager gives (16, 16, 1); Dynamo guards strides under dynamic shapes, so a fed-back output recompiled
    a, w = torch.randn(1, 8), torch.randn(8, 16)
    graph = trace(lambda a, w: (a @ w).view(1, 1, 16), a, w)
    (out,) = run_plan(lower(graph, check=True, emit_event=False), [a, w])
    assert out.stride() == (a @ w).view(1, 1, 16).stride() == (16, 16, 1)


def test_symbolic_int_inputs_and_outputs():
    values = {"x": Value(shape=("s0",), stride=(1,)), "n": Value(type="sym", dtype="int64"),
              "y": Value(shape=("s0",), stride=(1,))}
    from ember_core import Symbol

    graph = Graph(inputs=(Input("x"), Input("n")), values=values, symbols=(Symbol("s0", 5, 2),),
                  nodes=(Node(("y",), "aten.mul.Tensor", (Ref("x"), Ref("n"))),),
                  outputs=(Output("y"),))
    plan = lower(graph, check=True, emit_event=False)
    x = torch.randn(5)
    torch.testing.assert_close(run_plan(plan, [x, 3])[0], x * 3)


def test_an_int_input_as_an_ops_scalar_argument():
    """Under dynamic=True Dynamo makes an int argument a `sym` input, which an op may take as a Scalar (add's alpha,
    softplus's beta, elu's alpha, a pad value): the rules read it as a Python number and lowering failed
    ("float() argument must be ... not 'Ref'"), so the graph ran in the interpreter codegen."""
    graph = parse_graph("""# ember graph v1.1
# symbols: s0=3 in [2, inf]
def g(s0: sym:i64, x: f32[s0, 4], k: sym:i64):
  added: f32[s0, 4] = aten.add.Tensor(x, x, alpha=k)
  soft: f32[s0, 4] = aten.softplus.default(x, k, 20)
  elu: f32[s0, 4] = aten.elu.default(x, k)
  padded: f32[s0, 6] = aten.constant_pad_nd.default(x, [1, 1], k)
  return (added, soft, elu, padded)
""")
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs
    for rows, k in ((3, 2), (5, -3)):
        x = torch.randn(rows, 4)
        expected = (torch.add(x, x, alpha=k), torch.nn.functional.softplus(x, k), torch.nn.functional.elu(x, k),
                    torch.nn.functional.pad(x, (1, 1), value=k))
        torch.testing.assert_close(run_plan(plan, [rows, x, k]), list(expected))


@pytest.mark.parametrize("k", [-1, -4])
def test_a_symbolic_index_known_negative_counts_from_the_end(k):
    """The graph Dynamo makes for an int index once it is negative (range [-inf, -1], the view's offset `s1 + k`):
    select and slice count it from the end of the dim, as ATen does."""
    graph = parse_graph(f"""# ember graph v1.1
# symbols: s0=4 in [2, inf], s1=5 in [2, inf], k={k} in [-9223372036854775808, -1]
def g(s0: sym:i64, s1: sym:i64, x: f32[s0, s1], k: sym:i64):
  picked: f32[s0]{{s1}} offset=sym(s1 + k) = aten.select.int(x, 1, k)
  doubled: f32[s0] = aten.mul.Tensor(picked, 2)
  tail: f32[s0, -k]{{s1, 1}} offset=sym(s1 + k) = aten.slice.Tensor(x, 1, k)
  tripled: f32[s0, -k] = aten.mul.Tensor(tail, 3)
  return (doubled, tripled)
""")
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs
    for rows, cols in ((4, 5), (3, 7)):
        x = torch.randn(rows, cols)
        torch.testing.assert_close(run_plan(plan, [rows, cols, x, k]), [x[:, k] * 2, x[:, k:] * 3])


def test_a_symbolic_index_of_unknown_sign_runs_as_an_aten_call():
    graph = parse_graph("""# ember graph v1.1
# symbols: s0=4 in [2, inf], s1=5 in [2, inf], k=2 in [-9223372036854775808, inf]
def g(s0: sym:i64, s1: sym:i64, x: f32[s0, s1], k: sym:i64):
  picked: f32[s0]{s1} offset=sym(k) = aten.select.int(x, 1, k)
  doubled: f32[s0] = aten.mul.Tensor(picked, 2)
  return (doubled)
""")
    plan = lower(graph, check=True, emit_event=False)
    assert [e.op for e in plan.externs] == ["aten.select.int"]
    x = torch.randn(4, 5)
    for k in (2, -2):
        torch.testing.assert_close(run_plan(plan, [4, 5, x, k])[0], x[:, k] * 2)


def test_float_read_from_a_zero_dim_tensor_is_loaded_by_the_kernel():
    # Dynamo's form of a Python float that changed between calls: a 0-d float64 input read back with .item()
    values = {"x": Value(shape=(4,), stride=(1,)), "scale": Value(shape=(), stride=(), dtype="float64"),
              "s": Value(type="sym", dtype="float64"), "y": Value(shape=(4,), stride=(1,))}
    graph = Graph(inputs=(Input("x"), Input("scale")), values=values,
                  nodes=(Node(("s",), "aten._local_scalar_dense.default", (Ref("scale"),)),
                         Node(("y",), "aten.mul.Tensor", (Ref("x"), Ref("s")))),
                  outputs=(Output("y"),))
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs and "load scale[]" in str(plan)
    x = torch.randn(4)
    for scale in (2.0, -0.5):
        torch.testing.assert_close(run_plan(plan, [x, torch.tensor(scale, dtype=torch.float64)])[0], x * scale)


@pytest.mark.parametrize("dtype, x_dtype", [("int64", torch.float32), ("int64", torch.int32), ("bool", torch.float32)])
def test_int_or_bool_read_from_a_zero_dim_tensor_is_loaded_by_the_kernel(dtype, x_dtype):
    # `n = (x > 0).sum().item(); x * n`, as the trace frontend captures it: the kernel reads n from the tensor,
    # converted to the op's dtype as ATen converts a Python scalar
    name = {"int64": "int64", "bool": "bool"}[dtype]
    xname = {torch.float32: "float32", torch.int32: "int32"}[x_dtype]
    values = {"x": Value(shape=(4,), stride=(1,), dtype=xname), "n": Value(shape=(), stride=(), dtype=name),
              "s": Value(type="sym", dtype=name), "y": Value(shape=(4,), stride=(1,), dtype=xname)}
    graph = Graph(inputs=(Input("x"), Input("n")), values=values,
                  nodes=(Node(("s",), "aten._local_scalar_dense.default", (Ref("n"),)),
                         Node(("y",), "aten.mul.Tensor", (Ref("x"), Ref("s")))),
                  outputs=(Output("y"),))
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs and "load n[]" in str(plan)
    x = (torch.randn(4) * 10).to(x_dtype)
    for n in ((3, -7, 2**40) if dtype == "int64" else (True, False)):
        got = run_plan(plan, [x, torch.tensor(n, dtype=getattr(torch, name))])[0]
        torch.testing.assert_close(got, x * n)


SGD_STEP = """# ember graph v1.1
def step(lr: f64[], p: f32[6], grad: f32[6], n: i64[]):
  lr_1: sym:f64 = aten._local_scalar_dense.default(lr)
  n_1: sym:i64 = aten._local_scalar_dense.default(n)
  neg: sym:f64 = operator.neg(lr_1)
  decay: sym:f64 = operator.mul(lr_1, 0.001)
  half: sym:f64 = operator.truediv(neg, 2)
  sq: sym:f64 = operator.pow(lr_1, 2)
  both: sym:f64 = operator.sub(operator.add(half, sq), decay)
  root: sym:f64 = torch.sym_sqrt(lr_1)
  count: sym:i64 = operator.add(n_1, 1)
  shrunk: f32[6] = aten.add.Tensor(p, p, alpha=both)
  stepped: f32[6] = aten.add.Tensor(shrunk, grad, alpha=neg)
  scaled: f32[6] = aten.mul.Tensor(stepped, root)
  counted: f32[6] = aten.mul.Tensor(scaled, count)
  return (counted)
"""


def test_python_arithmetic_on_numbers_read_at_run_time_is_computed_by_a_kernel():
    """An optimizer's step once Dynamo made its learning rate an input (a scheduler changed it): `-lr`,
    `lr * weight_decay` are Python arithmetic on the number read from the 0-d tensor. Each is a 0-d kernel in the
    number's dtype (a Python float: float64, as Python computes it), read by the kernels that use it; they were
    symbols nothing binds, and the graph ran in the interpreter codegen."""
    graph = parse_graph(SGD_STEP.replace("operator.sub(operator.add(half, sq), decay)", "operator.sub(hsq, decay)")
                        .replace("  both:", "  hsq: sym:f64 = operator.add(half, sq)\n  both:"))
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs
    p, grad = torch.randn(6), torch.randn(6)
    for lr, n in ((0.1, 3), (0.0375, -2), (1e-5, 0)):
        shrunk = torch.add(p, p, alpha=(-lr / 2 + lr ** 2) - lr * 0.001)
        want = torch.add(shrunk, grad, alpha=-lr) * math.sqrt(lr) * (n + 1)
        got = run_plan(plan, [torch.tensor(lr, dtype=torch.float64), p, grad, torch.tensor(n)])[0]
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("op, fn", [
    ("aten.softplus.default(x, s, 1.5)", lambda x, s: torch.nn.functional.softplus(x, beta=s, threshold=1.5)),
    ("aten.softplus.default(x, 2.0, s)", lambda x, s: torch.nn.functional.softplus(x, beta=2.0, threshold=s)),
    ("aten.elu.default(x, s)", lambda x, s: torch.nn.functional.elu(x, alpha=s)),
    ("aten.celu.default(x, s)", lambda x, s: torch.nn.functional.celu(x, alpha=s)),
    ("aten.softshrink.default(x, s)", lambda x, s: torch.nn.functional.softshrink(x, s)),
    ("aten.add.Tensor(x, x, alpha=s)", lambda x, s: torch.add(x, x, alpha=s)),
    ("aten.addcmul.default(x, x, x, value=s)", lambda x, s: torch.addcmul(x, x, x, value=s)),
    ("aten.hardtanh.default(x, -0.5, s)", lambda x, s: torch.nn.functional.hardtanh(x, -0.5, s)),
])
def test_a_rules_number_read_at_run_time_is_loaded_by_the_kernel(op, fn):
    """An activation's beta, alpha or threshold, an add's alpha, that Dynamo made an input: the kernel loads it
    and converts it to the op's compute dtype, as ATen converts a Python scalar (the rules did Python arithmetic
    on the reference: a TypeError, and the graph ran in the interpreter codegen)."""
    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[64], t: f64[]):\n"
                        "  s: sym:f64 = aten._local_scalar_dense.default(t)\n"
                        f"  y: f32[64] = {op}\n"
                        "  return (y)\n")
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs and "load t[]" in str(plan)
    x = torch.linspace(-3, 3, 64)
    for s in (0.37, 1.25, 2.5):
        got = run_plan(plan, [x, torch.tensor(s, dtype=torch.float64)])[0]
        torch.testing.assert_close(got, fn(x, s), msg=lambda m, s=s: f"s={s}: {m}")


@pytest.mark.parametrize("op, fn", [
    ("aten.addmm.default(x, x, x, beta=0.5, alpha=s)", lambda x, s: torch.addmm(x, x, x, beta=0.5, alpha=s)),
    ("aten.addmm.default(x, x, x, beta=neg)", lambda x, s: torch.addmm(x, x, x, beta=-s)),
    ("aten.linalg_vector_norm.default(x, s, [1])", lambda x, s: torch.linalg.vector_norm(x, s, [1])),
])
def test_an_aten_call_takes_a_number_read_at_run_time_as_the_number(op, fn):
    """An ATen call given a number read from a tensor at run time (addmm's alpha or beta, a norm's order, that
    Dynamo made an input): the call reads it from its 0-d buffer when it runs (`item(t)` in the plan's text). The
    graph ran in the interpreter codegen."""
    out = "f32[4, 4]" if "addmm" in op else "f32[4]"
    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[4, 4], t: f64[]):\n"
                        "  s: sym:f64 = aten._local_scalar_dense.default(t)\n"
                        "  neg: sym:f64 = operator.neg(s)\n"
                        f"  y: {out} = {op}\n"
                        "  return (y)\n")
    plan = lower(graph, check=True, emit_event=False)
    assert len(plan.externs) == 1 and "item(" in str(plan), str(plan)
    x = torch.randn(4, 4)
    for s in (0.37, 1.5, 3.0):
        got = run_plan(plan, [x, torch.tensor(s, dtype=torch.float64)])[0]
        torch.testing.assert_close(got, fn(x, s), msg=lambda m, s=s: f"s={s}: {m}")


CUDA_STEP = """# ember graph v1.1
def step(lr: f64[], p: f32[6]@cuda:0, grad: f32[6]@cuda:0):
  lr_1: sym:f64 = aten._local_scalar_dense.default(lr)
  neg: sym:f64 = operator.neg(lr_1)
  stepped: f32[6]@cuda:0 = aten.add.Tensor(p, grad, alpha=neg)
  m: f32[6, 6]@cuda:0 = aten.view.default(stepped, [6, 1])
  outer: f32[6, 6]@cuda:0 = aten.expand.default(m, [6, 6])
  mixed: f32[6, 6]@cuda:0 = aten.addmm.default(outer, outer, outer, alpha=lr_1)
  return (stepped, mixed)
"""


def test_a_cpu_number_in_a_cuda_graph_is_copied_for_kernels_and_read_on_the_host_by_calls():
    """A CUDA optimizer step under a scheduler: Dynamo passes the learning rate as a 0-d CPU float64 tensor, its
    first input. The plan is for CUDA (it was for the CPU, with every CUDA op an ATen call); kernels load a device
    copy of the number, made by one ATen call where it is read (a GPU kernel cannot read host memory, and the
    interpreter, running CPU tensors, cannot show that), and ATen calls read the CPU tensor itself (no wait for
    the device)."""
    graph = parse_graph(CUDA_STEP)
    plan = lower(graph, check=True, emit_event=False)
    assert plan.device == "cuda:0"
    copies = [e for e in plan.externs if e.op == "aten._to_copy.default"]
    assert len(copies) == 1 and copies[0].args == (Ref("lr"),)
    assert copies[0].kwargs == {"device": torch.device("cuda:0")}
    on_cpu = {inp.name for inp in graph.inputs if graph.values[inp.name].device == "cpu"}
    assert not [(k.name, i.buffer) for k in plan.kernels for i in k.instrs() if i.buffer in on_cpu]
    (addmm,) = [e for e in plan.externs if e.op == "aten.addmm.default"]
    assert addmm.kwargs["alpha"] == Item("lr")


def test_a_number_read_from_a_tensor_used_as_an_index_is_refused_with_its_reason():
    """`take(x, i)` with a 0-d index (Dynamo of torch 2.14): the number indexes a view. Kernels read such numbers
    from their tensor as operands, but a view's index or a size is plan arithmetic over symbols bound from the
    inputs' shapes, so the graph is refused with that reason (a `lowering` fallback: the interpreter codegen runs
    it), not with 'expected a scalar'."""
    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[4], i: i64[]):\n"
                        "  i_1: sym:i64 = aten._local_scalar_dense.default(i)\n"
                        "  y: f32[] = aten.select.int(x, 0, i_1)\n"
                        "  return (y)\n")
    with pytest.raises(LoweringError, match=r"'i_1' is a number read from a tensor at run time .* y uses it as an "
                                            r"integer"):
        lower_graph(graph)


def test_a_view_at_a_number_read_from_a_tensor_is_an_aten_call_that_reads_it():
    """`narrow(x, 0, start, 2)` with a 0-d start: narrow's rule cannot take it (a view's offset is plan
    arithmetic), so narrow runs as an ATen call given `start.item()` when it runs."""
    graph = parse_graph("# ember graph v1.1\n"
                        "def g(x: f32[4], i: i64[]):\n"
                        "  i_1: sym:i64 = aten._local_scalar_dense.default(i)\n"
                        "  y: f32[2] = aten.narrow.default(x, 0, i_1, 2)\n"
                        "  z: f32[2] = aten.exp.default(y)\n"
                        "  return (z)\n")
    plan = lower(graph, check=True, emit_event=False)
    assert [e.op for e in plan.externs] == ["aten.narrow.default"] and "item(i)" in str(plan)
    x = torch.randn(4)
    for start in (0, 2, 1):
        torch.testing.assert_close(run_plan(plan, [x, torch.tensor(start)])[0], x[start:start + 2].exp())


def test_symbolic_floats_of_sizes_are_computed_in_float64():
    """`d ** -0.5`, `n / 3`, `d / 2` of symbolic sizes are floats: computed from the sizes as Python would, not
    read as an integer index (or as a symbol nothing binds)."""
    def fn(x):
        n, d = x.shape
        return x * d ** -0.5 + n / 3, x * (d / 2)
    plan = check(fn, torch.randn(5, 8), mode="symbolic", others=[(torch.randn(7, 3),), (torch.randn(2, 16),)])
    ops = {i.op.value for k in plan.kernels for i in k.instrs()}
    assert "sqrt" in ops and not plan.externs


def test_roots_of_symbolic_sizes_are_computed_in_float64():
    """SDPA's math path scales q and k by sqrt(1 / sqrt(d)), which sympy keeps as `1.0 / d ** (1/4)`: there was no
    float form of a fourth root, mul.Scalar ran as an ATen call given a float expression, and the plan did not
    parse (the graph ran in the interpreter codegen)."""
    def fn(x):
        d = x.shape[1]
        return x * (1.0 / d ** 0.5) ** 0.5, x * d ** (1 / 3)
    plan = check(fn, torch.randn(5, 8), mode="symbolic", others=[(torch.randn(7, 3),), (torch.randn(2, 16),)])
    assert not plan.externs


def test_a_symbolic_value_without_a_rule_fails_lowering_instead_of_reading_an_unbound_symbol(monkeypatch):
    from ember_lowering import LoweringError, sym_rules

    monkeypatch.delitem(sym_rules, "operator.pow")
    graph = trace(lambda x: x * x.shape[1] ** -0.5, torch.randn(5, 8), mode="symbolic")
    with pytest.raises(LoweringError, match=r"symbolic value 'pow_1' \(operator.pow\) has no lowering rule"):
        lower(graph, emit_event=False)


def test_dead_nodes_are_not_lowered():
    plan = lower_graph(trace(lambda x: (x.exp(), x.sin())[0], torch.randn(3)))
    assert len(plan.kernels) == 1 and not any(i.op.value == "sin" for i in plan.kernels[0].instrs())


def test_constants_are_buffers_read_by_name():
    w = torch.randn(3)
    graph = trace(lambda x: x * torch.ones(3) + 1, torch.randn(3))
    assert graph.constants == {} or graph.constants
    check(lambda x: x + w.sum(), torch.randn(3), mode="real")


def test_bind_args_fills_schema_defaults():
    node = Node(("y",), "aten.add.Tensor", (Ref("a"), Ref("b")))
    assert bind_args(node) == {"self": Ref("a"), "other": Ref("b"), "alpha": 1}


def test_lower_emits_kernels_planned_with_the_plan_text(monkeypatch):
    events = []
    monkeypatch.setattr("ember_lowering._lowering.emit", events.append)
    graph = trace(lambda x: torch.softmax(x, -1), torch.randn(2, 3))
    plan = lower(graph)
    (event,) = events
    assert event.kind == "kernels_planned" and event.stage == "lowering" and event.source == str(plan)
    assert event.data["graph"] == graph.name
    assert event.artifact == "kernels" and "1 kernels" in event.message
    decisions = event.data["decisions"]
    assert decisions and all(isinstance(d, Decision) for d in decisions)
    assert ("fuse-vertical", "fused", "same-iteration") in {(d.pass_id, d.verdict, d.reason) for d in decisions}
    assert event.data["seconds"] >= 0


def test_kernels_planned_lists_each_step_with_its_sizes_and_origins(monkeypatch):
    events = []
    monkeypatch.setattr("ember_lowering._lowering.emit", events.append)
    graph = trace(lambda x, w: torch.softmax(x @ w, -1), torch.randn(4, 3), torch.randn(3, 5))
    plan = lower(graph)
    (event,) = events
    steps = event.data["steps"]
    assert [s["kind"] for s in steps] == ["extern", "kernel"]
    assert steps[0]["name"] == "aten.mm.default" and steps[0]["sizes"] == "4x5"
    assert steps[1] == {"kind": "kernel", "name": plan.kernels[0].name, "sizes": "4x5",
                        "origins": list(plan.kernels[0].origins)}


def test_public_names():
    assert set(ember_lowering.__all__) <= set(dir(ember_lowering))
    assert Extern in (ember_lowering.Extern,)


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_a_transformer_block_end_to_end(mode):
    d = 16

    def block(x, wq, wo, g, w1, w2):
        h = torch.nn.functional.layer_norm(x, (d,), g)
        q = (h @ wq).view(2, 5, 2, 8).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        x = x + a.transpose(1, 2).reshape(2, 5, d) @ wo
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x + torch.nn.functional.gelu(h @ w1) @ w2

    args = (torch.randn(2, 5, d), torch.randn(d, d), torch.randn(d, d), torch.randn(d), torch.randn(d, 4 * d),
            torch.randn(4 * d, d))
    check(block, *args, mode=mode)


@pytest.mark.parametrize("name", __import__("ember_core.testing", fromlist=["battery_names"]).battery_names())
def test_ember_core_battery(name):
    """Every graph of ember-core's battery lowers, verifies, round-trips and matches the Interpreter."""
    from ember_core.testing import battery_case
    from lowering_checks import assert_same, clone

    case = battery_case(name)
    constants = {n: c.tensor for n, c in case.graph.constants.items()}
    plans = [lower(case.graph, passes=(), check=True, emit_event=False),
             lower(case.graph, check=True, emit_event=False)]
    for inputs in case.input_sets():
        expected = ember_core_interpret(case.graph, inputs)
        for plan in plans:
            assert_same(expected, run_plan(plan, [clone(x) for x in inputs], constants))


def ember_core_interpret(graph, inputs):
    from ember_core import interpret
    from lowering_checks import clone

    return interpret(graph, [clone(x) for x in inputs])


def test_a_float_read_out_of_a_0d_tensor_is_read_by_the_kernels():
    # how Dynamo passes a Python float that changes between calls: a 0-d float64 input and `.item()`
    scalar = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    plan = check(lambda x, s: (torch.softmax(x * s.item(), -1) + s.item(), x.clamp(min=s.item())), torch.randn(4, 8),
                 scalar(0.7), others=[(torch.randn(4, 8), scalar(-1.5))])
    assert not plan.externs and plan.kernels


def test_a_float_read_out_of_a_tensor_that_an_aten_call_takes_is_read_when_the_call_runs():
    # the extern's schema wants a number where the graph has the 0-d tensor's value: it gets `t.item()` (it was
    # refused, and the graph left to ATen whole)
    graph = trace(lambda x, s: (torch.special.zeta(x, s.item()),), torch.randn(4, 4),
                  torch.tensor(0.5, dtype=torch.float64))
    plan = lower(graph, check=True, emit_event=False)
    assert "item(" in str(plan)
    x = torch.rand(4, 4) + 1.5
    for s in (0.5, 2.0):
        torch.testing.assert_close(run_plan(plan, [x, torch.tensor(s, dtype=torch.float64)])[0],
                                   torch.special.zeta(x, s))


def test_a_symbolic_float_input_is_refused():
    # kernels take symbols as integers: a float read as one would be truncated without a word
    graph = parse_graph("# ember graph v1.0\n"
                        "def g(x: f32[4], s: sym:f64):\n"
                        "  y: f32[4] = aten.mul.Tensor(x, s)\n"
                        "  return (y)\n")
    with pytest.raises(LoweringError, match="symbolic float64"):
        lower(graph)


def test_an_effectful_op_without_outputs_read_stays_an_extern_call_in_order():
    graph = parse_graph("""# ember graph v1.0
def g(x: f32[3, 3]):
  getitem, getitem_1: f32[3, 3], i32[] = aten.linalg_cholesky_ex.default(x)
  _linalg_check_errors: none:b8 = aten._linalg_check_errors.default(getitem_1, "linalg.cholesky", is_matrix=True)
  exp: f32[3, 3] = aten.exp.default(getitem)
  return (exp)
""")
    plan = lower(graph, check=True, emit_event=False)
    assert [e.op for e in plan.externs] == ["aten.linalg_cholesky_ex.default", "aten._linalg_check_errors.default"]
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        run_plan(plan, [-torch.eye(3)], {})
    x = torch.randn(3, 3)
    x = x @ x.T + 3 * torch.eye(3)
    torch.testing.assert_close(run_plan(plan, [x], {})[0], torch.linalg.cholesky(x).exp())
