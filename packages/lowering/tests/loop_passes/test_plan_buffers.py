"""plan-buffers: dead temps lend their storage; outputs, inputs and live values never do."""

import torch
from ember_lowering import Loop
from ember_lowering._scheduler import default_passes
from ember_lowering.loop_passes.fuse_inline import FuseInline
from ember_lowering.loop_passes.plan_buffers import PlanBuffers
from lowering_checks import before_after, check

X = torch.randn(6, 8)


def chain(x):
    a = x.sin().exp().tanh()  # each stays materialized: read twice and expensive
    b = (a + a.t().t().sum(0)).sin().exp().tanh()
    c = (b + b.sum(0)).sin().exp().tanh()
    return c + c.sum(0)


def test_a_dead_temp_lends_its_storage_to_a_later_one():
    _, after, decisions = before_after(chain, X, passes=[FuseInline(), PlanBuffers()])
    reused = [b for b in after.buffers if b.base is not None and b.kind == "temp"]
    noted = {d.subjects for d in decisions if d.verdict == "reused"}  # dead storage or in place
    assert reused and noted == {(b.name, b.base) for b in reused}
    assert all(after.buffer(b.base).kind == "temp" for b in reused)


def test_reuse_keeps_results_right_with_every_pass():
    check(chain, X)
    check(chain, X, mode="symbolic")


def test_outputs_and_inputs_are_never_reused():
    _, after, _ = before_after(lambda x: (x.exp() + 1, (x.exp() + 1).sin()), X, passes=[PlanBuffers()])
    for b in after.buffers:
        if b.base is not None and b.kind != "view":
            assert after.buffer(b.base).kind == "temp" and b.kind == "temp"


def test_an_extern_result_that_may_alias_its_argument_keeps_it_alive():
    def fn(x):
        y = x.sin().exp().tanh()
        u = y.unfold(1, 2, 1)  # an extern returning a view of y
        z = (x * 3).sin().exp().tanh()  # a temp written while u still reads y's storage
        return u.sum((1, 2)) + z.sum(1) + (z + 1).sum(1), u  # u, an output, may alias y's storage
    _, after, decisions = before_after(fn, X, passes=[FuseInline(), PlanBuffers()])
    assert not any(d.verdict == "reused" and d.subjects[1] == "tanh" for d in decisions)
    check(fn, X)


W = torch.randn(8, 8)


def test_an_aten_result_lends_its_storage_in_place_to_the_kernel_that_reads_it_last():
    def fn(x, w):
        return ((x @ w).sin() * 2) @ w  # the scaled sine is written where the matmul's result was
    _, after, decisions = before_after(fn, X, W, passes=[PlanBuffers()])
    assert [d.subjects for d in decisions if d.reason == "in-place"] == [("sin", "mm"), ("mul", "mm")]
    assert after.buffer("sin").base == after.buffer("mul").base == "mm"  # the sine in place too, then the product
    check(fn, X, W)
    check(fn, X, W, mode="symbolic")  # symbolic sizes: no in place (the elements are not provably distinct)


def test_an_aten_result_lends_its_storage_once_dead():
    def fn(x, w):
        s = (x @ w).sum(1, keepdim=True)  # reads the matmul's result last; writes something smaller
        t = (x * s).sin().exp().tanh()
        return (t + t.sum(0)) @ w
    _, after, decisions = before_after(fn, X, W, passes=[FuseInline(), PlanBuffers()])
    reused = {d.subjects for d in decisions if d.reason == "dead-storage"}
    assert any(base == "mm" for _, base in reused), reused
    check(fn, X, W)


def test_a_kernel_of_several_loops_writes_apart_from_what_it_reads():
    fn = lambda x, w: torch.softmax(x @ w, -1) @ w  # noqa: E731  max, sum, then the normalized values
    _, after, decisions = before_after(fn, X, W, passes=default_passes())
    (kernel,) = after.kernels
    assert sum(isinstance(s, Loop) for s in kernel.body) > 1
    assert not [d for d in decisions if d.reason == "in-place"]
    check(fn, X, W)


def test_a_single_point_is_written_in_place_too():
    """A 0-d kernel (no dims: one point) reading a dying 0-d temp: its address is a constant (asking sympy for
    the polynomial's degree in no variables raised, and the graph ran in the interpreter: training fuzzer)."""
    fn = lambda x: (x.sum().exp() * x,)  # noqa: E731
    _, after, decisions = before_after(fn, X, passes=[PlanBuffers()])
    assert ("exp", "sum_1") in {d.subjects for d in decisions if d.reason == "in-place"}
    check(fn, X)


def test_a_temp_takes_the_smallest_dead_storage_and_never_one_over_twice_its_size():
    """A layer norm's output took the storage of the first matmul result to die, four times its size, held from
    one transformer block to the next: a checkpointed stack's forward peak grew 4 MiB a block. Now the smallest
    that fits, and none more than twice the size."""
    w_big, w_small = torch.randn(8, 32), torch.randn(8, 8)

    def fn(x):
        big = (x @ w_big).sin().exp().tanh()  # dies first: 4x the size of x
        y = (big.sum(1, keepdim=True) * x).sin().exp().tanh()
        small = (y @ w_small).cos().exp().tanh()  # dies next: x's size
        z = (small.sum(1, keepdim=True) * y).sin().exp()  # x's size: the small storage, not the big one
        return z + z.sum(0)

    _, after, decisions = before_after(fn, X, passes=[FuseInline(), PlanBuffers()])
    size = {b.name: int(torch.Size(b.shape).numel()) for b in after.buffers}
    for name, base in {d.subjects for d in decisions if d.reason == "dead-storage"}:
        assert size[base] <= 2 * size[name], (name, base, size)
    check(fn, X)
