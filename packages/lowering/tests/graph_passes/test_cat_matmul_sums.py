"""cat-matmul-sums: a sum of matmuls with a small inner dim is one matmul of the operands concatenated."""

import torch
from ember_core import verify
from ember_lowering.graph_passes.cat_matmul_sums import MAX_INNER, CatMatmulSums
from lowering_checks import check, plan_of, trace

T = 6


def ops(graph) -> list[str]:
    return [n.op.removeprefix("aten.").removesuffix(".default") for n in graph.nodes]


def weight_gradient(*gh):
    """What autograd writes for the gradient of a weight read at each of T steps (`h_t @ W.T`): `g_t^T @ h_t`,
    one per step, added up (the last step first), and read transposed twice."""
    gs, hs = gh[:T], gh[T:]
    total = None
    for t in reversed(range(T)):
        part = torch.mm(gs[t].t(), hs[t]).t().t()
        total = part if total is None else total + part
    return total * 2


def steps(inner: int = 16):
    return [torch.randn(inner, 12) for _ in range(T)] + [torch.randn(inner, 5) for _ in range(T)]


def test_a_sum_of_small_matmuls_is_one_matmul_of_concatenated_operands():
    args = steps()
    graph = CatMatmulSums().run(trace(weight_gradient, *args))
    verify(graph)
    assert ops(graph).count("mm") == 1 and ops(graph).count("cat") == 2 and "add.Tensor" not in ops(graph)
    check(weight_gradient, *args)


def test_transposed_results_and_plain_operands():
    def fn(*ab):
        return sum((torch.mm(ab[t], ab[T + t]).t() for t in range(1, T)), torch.mm(ab[0], ab[T]).t())
    args = [torch.randn(7, 3 + t) for t in range(T)] + [torch.randn(3 + t, 4) for t in range(T)]
    graph = CatMatmulSums().run(trace(fn, *args))
    verify(graph)
    assert ops(graph).count("mm") == 1 and "add.Tensor" not in ops(graph)
    check(fn, *args)


def test_sums_it_leaves_alone():
    def plain(*gh):
        gs, hs = gh[:len(gh) // 2], gh[len(gh) // 2:]
        return sum((torch.mm(g.t(), h) for g, h in zip(gs[1:], hs[1:])), torch.mm(gs[0].t(), hs[0]))

    def read_twice(*gh):
        first = torch.mm(gh[0].t(), gh[T])
        return sum((torch.mm(gh[t].t(), gh[T + t]) for t in range(1, T)), first), first

    cases = {
        "three terms": (plain, [torch.randn(16, 12) for _ in range(3)] + [torch.randn(16, 5) for _ in range(3)]),
        "a large inner dim": (plain, steps(MAX_INNER + 1)),
        "a matmul read twice": (read_twice, steps()),
    }
    for what, (fn, args) in cases.items():
        graph = trace(fn, *args)
        assert ops(CatMatmulSums().run(graph)).count("mm") == ops(graph).count("mm"), what
        check(fn, *args)
    graph = trace(plain, *steps(), mode="symbolic")
    assert CatMatmulSums().run(graph) is graph  # symbolic sizes: left as written


def test_the_pass_runs_before_lowering_and_the_values_are_the_sums():
    args = steps()
    mms = lambda plan: [ln for ln in str(plan).splitlines() if ln.strip().startswith("extern") and "mm" in ln]  # noqa: E731
    assert len(mms(plan_of(weight_gradient, *args))) == 1
    assert len(mms(plan_of(weight_gradient, *args, mode="symbolic"))) == T
    check(weight_gradient, *args)
    check(weight_gradient, *args, mode="symbolic")


def test_a_graph_that_may_write_in_place_is_left_alone():
    """The one matmul reads the operands where the last add was, later than the matmuls it replaces: a write in
    between (here into the first step's operand) would change what it reads."""
    from ember_core import Node, Ref

    graph = trace(weight_gradient, *steps())
    write = Node(("written",), "aten.add_.Tensor", (Ref(graph.input_names[0]), 1.0), {})
    at = next(k for k, n in enumerate(graph.nodes) if n.op == "aten.mm.default") + 1
    graph = graph.replace(nodes=(*graph.nodes[:at], write, *graph.nodes[at:]))
    assert CatMatmulSums().run(graph) is graph
