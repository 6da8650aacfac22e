"""Training through ember's own AOT autograd and each partitioner, against eager (outputs and gradients)."""

from __future__ import annotations

import copy

import ember
import ember_core
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_training_step, assert_same_value_and_grad, grads_of
from models import MLP, Block, SmallCNN, TinyGPT
from torch import nn

PARTITIONERS = ["default", "mincut"]


@pytest.fixture(params=PARTITIONERS)
def partition(request):
    return request.param


def compile_for_training(model, frontend, partition, **extra):
    return ember.compile(model, options={"frontend": frontend, "partition": partition, **extra})


class ConvBNReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv-BN, a ReLU between, the identity added before the last ReLU."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + x)


class GeluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(32, 128), nn.Linear(128, 32)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class LayerNormAttention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        h = self.ln(x)
        return x + self.attn(h, h, h, need_weights=False)[0]


BLOCKS = {
    "gelu_mlp": (GeluMLP, (4, 32)),
    "layernorm_attention": (LayerNormAttention, (2, 8, 32)),
    "conv_bn_relu": (ConvBNReLU, (2, 4, 8, 8)),
    "resnet_basic_block": (BasicBlock, (2, 8, 8, 8)),
    "gpt_block": (Block, (2, 8, 32)),
    "mlp": (MLP, (4, 16)),
}


@pytest.mark.parametrize("block", list(BLOCKS))
def test_block_grads_match_eager(block, frontend, partition):
    cls, shape = BLOCKS[block]
    model = cls()
    twin = copy.deepcopy(model)
    compiled = compile_for_training(twin, frontend, partition)
    x = torch.randn(*shape)
    with ember.record_events() as rec:
        out = compiled(x.clone().requires_grad_())
    out.float().pow(2).mean().backward()
    model(x.clone().requires_grad_()).float().pow(2).mean().backward()
    assert any(e.kind == "joint_traced" for e in rec.events), "training must go through ember's AOT autograd"
    assert any(e.kind == "partitioned" and partition in e.message for e in rec.events)
    for e, c in zip(grads_of(model.parameters()), grads_of(twin.parameters())):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


class PadToWidth(nn.Module):
    """Keeps every other column and pads back to the input's width: the pad amount is computed from a size."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, 1))

    def forward(self, x):
        n = x.shape[1]
        return F.pad(x[:, ::2] * self.w, (0, n - (n + 1) // 2)).sin()


def test_training_with_dynamic_shapes_and_a_pad_by_a_symbolic_amount(frontend):
    """Under `dynamic=True` the pad amount is a symbolic size; the joint trace's first run over the graph raised in
    ATen's C++ `constant_pad_nd` ("SymIntArrayRef expected to contain only concrete integers"), so training any
    such model failed to compile. One graph now serves every width, with eager's gradients."""
    model = PadToWidth()
    compiled = ember.compile(model, dynamic=True, options={"frontend": frontend})
    with ember.record_events() as rec:
        for shape in ((3, 7), (5, 12), (2, 16)):
            assert_same_training_step(model, compiled, [torch.randn(*shape, requires_grad=True)])
    assert sum(e.kind == "joint_traced" for e in rec.events) == 1
    assert not [e for e in rec.events if e.kind == "fallback"]



def unbatched_conv(x, w, b, stride, padding, groups):
    return F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)


def test_a_dynamic_conv_recompiled_for_an_unbatched_input_trains_its_graph():
    """`dynamic=True`, a batched then an unbatched input: the second graph takes its strides, padding and groups
    as int inputs `s3`..`s6` next to the sizes `s0`..`s2`. The joint trace's ShapeEnv called the graph's `s2` `s6`, the
    name of another input, and mapping its names back renamed input `s6` to `s2` ('value s2 is defined twice'):
    the graph's gradient ran under eager autograd (found by `python -m tests.opinfo run --dynamic`)."""
    compiled = ember.compile(unbatched_conv, dynamic=True)
    with ember.record_events() as rec:
        for shape in ((1, 3, 4, 4), (3, 4, 4), (3, 6, 5)):
            x, w, b = torch.randn(*shape), torch.randn(3, 3, 3, 3), torch.randn(3)
            eager_leaves = [t.clone().requires_grad_() for t in (x, w, b)]
            ember_leaves = [t.clone().requires_grad_() for t in (x, w, b)]
            eager, out = unbatched_conv(*eager_leaves, (2, 2), 2, 1), compiled(*ember_leaves, (2, 2), 2, 1)
            torch.testing.assert_close(out, eager)
            weights = torch.randn(out.shape)
            torch.testing.assert_close(torch.autograd.grad((out * weights).sum(), ember_leaves),
                                       torch.autograd.grad((eager * weights).sum(), eager_leaves))
    assert not [e.message for e in rec.events if e.kind == "fallback"]


def pad_by(x, k):
    return F.pad(x, (k, -1)) * 2


def test_a_pad_by_an_int_argument_trains_its_backward_compiled():
    """`pad(x, (k, -1))` under dynamic=True: the gradient is [n, s1] computed from a tangent of [n, s1 + k - 1], and
    the partitioner gave the backward no input that shows s1 bare (it looked at the backward's arguments only), so
    the backward ran in the interpreter codegen. x is saved for its shape now; every k matches eager."""
    compiled = ember.compile(pad_by, dynamic=True)
    with ember.record_events() as rec:
        for k in (2, 3, 0, 4):
            assert_same_value_and_grad(pad_by, compiled, torch.randn(4, 5), k, where=f"k={k}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]


def sum_over_and_scale_by(x, dim, k):
    return x.sum(dim, keepdim=True) * x * k + k


def test_an_int_argument_that_changes_sign_between_calls(frontend):
    """Called again with another int, Dynamo makes the int a symbolic input (`Sym(-1)`); the joint trace gave every
    symbol a positive range, so training with a negative dim or factor failed to compile ("positive set for negative
    value: -1"). Now an int input's symbol may take any value: each call matches eager, forward and backward."""
    compiled = ember.compile(sum_over_and_scale_by, options={"frontend": frontend})
    with ember.record_events() as rec:
        for dim, k, grad in ((1, 3, True), (-1, -4, True), (-2, -1, True), (-1, -4, False), (0, 2, False)):
            x_eager = torch.randn(4, 5, requires_grad=grad)
            x_ember = x_eager.detach().clone().requires_grad_(grad)
            eager, out = sum_over_and_scale_by(x_eager, dim, k), compiled(x_ember, dim, k)
            torch.testing.assert_close(out, eager)
            if grad:
                weights = torch.linspace(-1, 2, 5)
                (eager * weights).sum().backward()
                (out * weights).sum().backward()
                torch.testing.assert_close(x_ember.grad, x_eager.grad)
    assert not [e for e in rec.events if e.kind == "fallback"]


INT_ARGUMENTS = {
    "pow": lambda x, k: torch.pow(x, k),  # C++ backward compares the Scalar exponent with 0
    "rpow": lambda x, k: torch.pow(k, x),
    "celu": lambda x, k: F.celu(x, alpha=k),  # traced as `where` of its branches: no branch on the int
    "norm": lambda x, k: x.norm(p=k),
    "renorm": lambda x, k: x.renorm(k, 0, 1.0),
}


@pytest.mark.parametrize("name", sorted(INT_ARGUMENTS))
def test_an_int_argument_a_backward_branches_on_trains_per_value(name):
    """`dynamic=True` makes an int argument a symbolic input. pow's backward compares it with 0 in C++, which raised
    'NYI SymInt equality' out of the joint trace: the call failed (as under torch.compile). celu's, norm's and
    renorm's backwards branch on it in Python, which fixes it in the trace, and the graph ran under eager autograd
    (the specialization took declared symbols only). Now each value of the int gets a build of its own; celu's
    joint traces it as `where` of its branches (ember_autograd._run_time_scalars), which asks nothing of the int,
    and one build serves every value."""
    fn = INT_ARGUMENTS[name]
    compiled = ember.compile(fn, dynamic=True)
    with ember.record_events() as rec:
        for k in (2, 3, 2, 4):
            assert_same_value_and_grad(fn, compiled, torch.randn(3, 5), k, where=f"k={k}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]
    built = [e.data["values"] for e in rec.events if e.kind == "graph_specialized"]
    assert sorted(v for values in built for v in values.values()) == ([] if name == "celu" else [2, 3, 4])


def test_softshrink_trains_with_dynamic_shapes():
    """softshrink is kept whole (its gradient at NaN), so autograd calls ATen's softshrink_backward, a TensorIterator
    kernel fake tensors of symbolic sizes cannot run: the joint trace raised out of the compile under dynamic=True.
    A joint trace of symbolic sizes takes its formula instead; every size matches eager."""
    def fn(x):
        return F.softshrink(x, 0.5)

    compiled = ember.compile(fn, dynamic=True)
    with ember.record_events() as rec:
        for n in (5, 8, 3):
            x = torch.randn(4, n)
            x[0, :2] = torch.tensor([0.5, -0.5])  # the edges of the interval the gradient is 0 in
            assert_same_value_and_grad(fn, compiled, x, where=f"n={n}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]


def scatter_slice(x, src, start, end, step):
    return torch.slice_scatter(x, src, 0, start, end, step)


def test_a_joint_trace_that_cannot_relate_specialized_sizes_runs_under_eager_autograd():
    """slice_scatter with int start, end and step under dynamic=True: the backward fixes the ints, and the graph
    specialized at their values traced a source gradient of `(21 - s)//2` rows, which its symbols could not prove
    equal to the source's (Dynamo's guards related them): ATen's check raised out of the call. Such a trace
    failure is a visible fallback now (cause autograd), every call with eager's numbers."""
    compiled = ember.compile(scatter_slice, dynamic=True)
    with ember.record_events() as rec:
        for rows, start, end, step in ((20, 0, 20, 1), (10, 10, 20, 1), (5, 10, 20, 2)):
            x, src = torch.randn(20, 4), torch.randn(rows, 4)
            eager_in = [x.clone().requires_grad_(), src.clone().requires_grad_()]
            ember_in = [x.clone().requires_grad_(), src.clone().requires_grad_()]
            eager, out = scatter_slice(*eager_in, start, end, step), compiled(*ember_in, start, end, step)
            weights = torch.randn(out.shape)
            torch.testing.assert_close((out, *torch.autograd.grad((out * weights).sum(), ember_in)),
                                       (eager, *torch.autograd.grad((eager * weights).sum(), eager_in)))
    assert {e.data.get("cause") for e in rec.events if e.kind == "fallback"} <= {"autograd"}


def running_products(x, w):
    return (torch.tanh(x) * 0.5 + 1).cumprod(1) * w


def test_a_backward_that_reads_a_size_as_an_int_trains_per_value_of_that_size(frontend):
    """cumprod's backward reads the scanned dim's size as an int (a size of one takes another path), which fixes
    that symbol of a dynamic graph at its traced value: the joint graph came out with the value in place of the
    symbol, failed verification, and the graph ran under eager autograd. Now the graph is compiled per value of the
    fixed symbol (a `graph_specialized` event each), the other symbols stay symbolic: a new batch size reuses the
    build, a new width makes another; every call matches eager, forward and backward, and nothing falls back."""
    compiled = ember.compile(running_products, options={"frontend": frontend}, dynamic=True)
    with ember.record_events() as rec:
        for batch, width in ((4, 16), (6, 16), (4, 9), (3, 16)):
            x_eager = torch.randn(batch, width, requires_grad=True)
            x_ember = x_eager.detach().clone().requires_grad_()
            w = torch.randn(width)
            eager, out = running_products(x_eager, w), compiled(x_ember, w)
            torch.testing.assert_close(out, eager)
            weights = torch.linspace(-1, 2, width)
            (eager * weights).sum().backward()
            (out * weights).sum().backward()
            torch.testing.assert_close(x_ember.grad, x_eager.grad)
    assert not [e for e in rec.events if e.kind == "fallback"]
    specialized = [e.data["values"] for e in rec.events if e.kind == "graph_specialized"]
    assert [sorted(v.values()) for v in specialized] == [[16], [9]]


def test_past_its_limit_of_builds_a_specialized_graph_runs_new_values_under_eager_autograd(monkeypatch):
    import ember_runtime._specialized_graph as specialized

    monkeypatch.setattr(specialized, "MAX_SPECIALIZATIONS", 1)
    compiled = ember.compile(running_products, dynamic=True)
    with ember.record_events() as rec:
        for width in (16, 9, 7):
            x_eager = torch.randn(4, width, requires_grad=True)
            x_ember = x_eager.detach().clone().requires_grad_()
            w = torch.randn(width)
            eager, out = running_products(x_eager, w), compiled(x_ember, w)
            eager.sum().backward()
            out.sum().backward()
            torch.testing.assert_close((out, x_ember.grad), (eager, x_eager.grad))
    fallbacks = [e.message for e in rec.events if e.kind == "fallback"]
    assert len(fallbacks) == 1 and "new values run under eager autograd" in fallbacks[0]


def bf16_batch_norm(x, w, b):
    v = x / (x.abs() + 1)
    return F.batch_norm(v, torch.zeros(17, dtype=x.dtype), torch.ones(17, dtype=x.dtype), w, b, training=True)


def bf16_manual_norm(x, w, b):
    v = x / (x.abs() + 1)
    mu = v.mean(0)
    return (v - mu) * torch.rsqrt(((v - mu) ** 2).mean(0) + 1e-5) * w + b


@pytest.mark.parametrize("fn", [bf16_batch_norm, bf16_manual_norm])
def test_a_bfloat16_norm_of_rows_that_are_all_equal_has_eagers_zero_gradient(frontend, fn):
    """Every row the same (an expanded input): each column's variance is 0, x - mean is exactly 0 in eager, the
    norm's output is the bias and the weight's gradient 0. Lowering's keep-float32 left `v` unrounded inside each
    kernel, while the mean the forward stored was rounded to bfloat16: the backward subtracted a rounded mean from
    unrounded values, an error of 2^-9 that 1/sqrt(eps) made a weight gradient of order 1 (tests/training_fuzz,
    --dtype bfloat16, seed 109). Every bfloat16 result is now rounded as eager rounds it."""
    torch.manual_seed(0)
    x = torch.randn(1, 17).to(torch.bfloat16).expand(5, 17)
    w, b = (torch.randn(17).to(torch.bfloat16) for _ in range(2))
    g = torch.randn(5, 17).to(torch.bfloat16)

    def run(f):
        leaves = [t.detach().requires_grad_() for t in (x, w, b)]
        out = f(*leaves)
        return [out.detach(), *torch.autograd.grad(out, leaves, g)]

    eager, got = run(fn), run(ember.compile(fn, options={"frontend": frontend}))
    zero = torch.zeros(17, dtype=torch.bfloat16)
    assert torch.equal(eager[2], zero) and torch.equal(got[2], zero)
    torch.testing.assert_close(got[0], eager[0])  # bfloat16's tolerance: ATen's norm kernels sum in another order
    torch.testing.assert_close(got[3], eager[3])
    # x's gradient is 1/sqrt(eps) times g less its mean: a few bfloat16 steps of its own largest value apart
    torch.testing.assert_close(got[1], eager[1], rtol=0, atol=2 ** -5 * float(eager[1].abs().max()))


@pytest.mark.parametrize("fn", [bf16_batch_norm, bf16_manual_norm])
def test_a_bfloat16_norm_of_rows_that_are_all_equal_gives_its_bias_without_grad_too(frontend, fn):
    """The same norm under no_grad, where keep-float32 widens (no backward computes anything again): `v`'s
    statistics and the normalising are one kernel, which drops `v`'s rounding for all its readers alike, so the
    mean is taken of the very values it is subtracted from and x - mean is 0 as in float64: the output is the bias
    in every row (eager's ATen batch norm lands a bf16 step off in a few columns)."""
    torch.manual_seed(0)
    x = torch.randn(1, 17).to(torch.bfloat16).expand(5, 17)
    w, b = (torch.randn(17).to(torch.bfloat16) for _ in range(2))
    with torch.no_grad():
        eager, got = fn(x, w, b), ember.compile(fn, options={"frontend": frontend})(x, w, b)
    assert torch.equal(got, b.expand(5, 17))
    torch.testing.assert_close(got, eager)


def max_of_products_with_recomputed_inputs(x):
    v = F.tanhshrink(x)
    top = torch.maximum((v.unsqueeze(2) * (-x).unsqueeze(1)).amax(1), v)
    return torch.stack([top.sum() * 0.3, (-x).sum() * 0.4, (-x).sum() * 0.5]).sum(), -x


def test_a_max_gradient_sees_the_recomputed_input_with_the_forwards_bits(frontend):
    """The backward recomputed `x - tanh(x)` and compared it with the max the forward saved (`x == amax`, then
    divided by the count of equals). In the backward's kernel some elements fell in a vector loop's scalar tail,
    where glibc's tanhf runs instead of libmvec's (an ulp apart): no element equalled the max, the count was 0 and
    the gradient NaN (a row of 7; tests/training_fuzz seed 55). Scalar code now calls the vector functions."""
    x = torch.tensor([[1.8616, 0.9035, 1.3395, 1.2005, 1.0070, -0.9808, 1.2860],
                      [0.8200, -0.3700, -0.7102, 0.4119, -0.5152, 0.4628, 1.7001],
                      [0.3125, -0.9295, 0.8324, -0.3808, 0.7137, -0.2020, 1.2518]])
    compiled = ember.compile(max_of_products_with_recomputed_inputs, options={"frontend": frontend})
    grads = []
    for fn in (max_of_products_with_recomputed_inputs, compiled):
        leaf = x.clone().requires_grad_()
        loss, out = fn(leaf)
        (loss + out.sum()).backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


class CosineHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x, y):
        # a zero row (its norm under eps: clamped, the gradient passes through the clamp as in eager), a row
        # broadcast against a batch, and another dim
        return (F.cosine_similarity(self.proj(x), y, dim=1) * 2).sum() + F.cosine_similarity(x, y[:1], dim=-1).sum() \
            + F.cosine_similarity(x.unsqueeze(0), x.unsqueeze(1), dim=2, eps=1e-3).square().sum()


def test_cosine_similarity_trains_in_the_graph_with_eagers_gradients(frontend):
    """ATen's cosine_similarity clamps the norms in place under no_grad, which a graph cannot say: every graph
    with it ran eagerly (a fallback; 7 of 160 fuzzed programs). Traced through ember's kernel (the clamp's value,
    the gradient passed through it as eager's), it compiles, with eager's values and gradients."""
    model = CosineHead()
    compiled = ember.compile(model, options={"frontend": frontend})
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    x[2] = 0.0
    with ember.record_events() as rec:
        assert_same_training_step(model, compiled, [x.requires_grad_(), y.requires_grad_()])
    assert not [e for e in rec.events if e.kind == "fallback"]


def assign_a_column_from_a_row_sum(x):
    """The backward of the column assignment is a slice_scatter; its gradient's row sum reads the row sum of
    another gradient through a masked load."""
    v = torch.sqrt(x.cos().abs() + 0.1)
    row_max = v.amax(-1, keepdim=True).expand(x.shape) + 0
    row_sum = x.sum(1, keepdim=True).expand(x.shape) + 0
    a = v.clone()
    a[:, 0] = row_sum[:, 1] * 2
    return row_max * 0.3 + a * 0.4


def reduce_a_scattered_row_sum(x):
    s = x.sum(1, keepdim=True)
    zeros = torch.zeros_like(x)
    t = torch.slice_scatter(zeros, torch.where(torch.arange(x.shape[1]) == 1, s.expand(x.shape) * 2, zeros), 0, 0)
    return t.sum(1, keepdim=True) + x


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_reduction_of_another_reductions_result_waits_for_it(frontend, dynamic):
    """Fusion put the second row sum's loop into the first's kernel and moved the masked load of the first sum
    before the loop that computes it: the kernel read the temp buffer before it was written and returned garbage
    (1e21 and 1e36 where eager gave single digits), forward and backward, with no error."""
    for fn, x in ((reduce_a_scattered_row_sum, torch.randn(3, 7)), (assign_a_column_from_a_row_sum,
                                                                    torch.randn(3, 7, requires_grad=True))):
        compiled = ember.compile(fn, dynamic=dynamic, options={"frontend": frontend})
        for rows in (3, 5):
            x_eager = torch.randn(rows, 7, requires_grad=x.requires_grad)
            x_ember = x_eager.detach().clone().requires_grad_(x.requires_grad)
            eager, out = fn(x_eager), compiled(x_ember)
            torch.testing.assert_close(out, eager)
            if x.requires_grad:
                weights = torch.linspace(-1, 2, 7)
                (eager * weights).sum().backward()
                (out * weights).sum().backward()
                torch.testing.assert_close(x_ember.grad, x_eager.grad)


SLICES_FROM_BEFORE_THE_START = {
    "last_three": lambda x: x[:, -3:].sin(),
    "from_minus_five_to_the_last": lambda x: x[:, -5:-1].exp(),
    "every_second_from_minus_nine": lambda x: x[:, -9::2] * 3,
}


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", list(SLICES_FROM_BEFORE_THE_START))
def test_a_slice_starting_before_the_dim_begins_gets_eagers_gradient(frontend, name, dynamic):
    """`x[:, -3:]` of a dim of 2 is the whole dim: its gradient's slice_scatter started writing at -1 (the start
    counted from the end but not clamped at 0, as the forward's slice was): the gradient came out shifted by a
    column, with no error, at static and symbolic sizes alike."""
    fn = SLICES_FROM_BEFORE_THE_START[name]
    compiled = ember.compile(fn, dynamic=dynamic, options={"frontend": frontend})
    for cols in (2, 3, 4, 7):
        assert_same_value_and_grad(fn, compiled, torch.randn(4, cols), where=f"{cols} columns")


def test_cnn_and_gpt_train_with_each_partitioner(frontend, partition):
    cnn = SmallCNN()
    assert_same_training_step(cnn, compile_for_training(cnn, frontend, partition),
                              [torch.randn(2, 3, 8, 8, requires_grad=True)], loss_fn=lambda o: o.sum())
    gpt = TinyGPT()
    twin = copy.deepcopy(gpt)
    idx, targets = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    compile_for_training(twin, frontend, partition)(idx, targets).backward()
    gpt(idx, targets).backward()
    for e, c in zip(grads_of(gpt.parameters()), grads_of(twin.parameters())):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


def test_dropout_function_grads_match_eager_under_the_same_seed(frontend, partition):
    def f(x, w):
        return F.dropout(x @ w, p=0.3, training=True).relu().sum()

    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    torch.manual_seed(3)
    out = compile_for_training(f, frontend, partition)(x, w)
    out.backward()
    torch.manual_seed(3)
    ref = f(x, w_ref)
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w.grad, w_ref.grad)


DETACHED = {
    # what distillation, EMA/BYOL targets and PPO ratios write: a target computed from the same input, detached
    "kl to a detached target": lambda x, w: F.kl_div((x @ w).log_softmax(1), (x @ w * 0.5).softmax(1).detach(),
                                                     reduction="batchmean"),
    "stop-gradient factor": lambda x, w: ((x @ w).sin().detach() * (x @ w)).sum(),
    "a view of a detached value": lambda x, w: ((x @ w).detach()[:, :4].exp() * w[:8, :4]).sum(),
    "detach_ in place": lambda x, w: (lambda h: (h.tanh().detach_() * h).sum())(x @ w),
    "a detached value as an output": lambda x, w: ((x @ w).detach() * 2, (x @ w).cos().sum()),
}


@pytest.mark.parametrize("case", list(DETACHED))
def test_a_detached_value_stops_the_gradient(case, frontend, partition):
    """`.detach()` decomposes to `aten.alias` in the core ATen table; the gradient must stop there as in eager."""
    f = DETACHED[case]
    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    with ember.record_events() as rec:
        out = compile_for_training(f, frontend, partition)(x, w)
    ref = f(xr, wr)
    torch.testing.assert_close(out, ref)
    sum(o.sum() for o in (out if isinstance(out, tuple) else (out,)) if o.requires_grad).backward()
    sum(o.sum() for o in (ref if isinstance(ref, tuple) else (ref,)) if o.requires_grad).backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
    assert not rec.kinds("fallback")


def test_in_place_op_on_an_intermediate(frontend, partition):
    def f(x, w):
        h = x @ w
        h.mul_(2).add_(1)
        h.relu_()
        return (h * h).sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    compile_for_training(f, frontend, partition)(x, w).backward()
    f(xr, wr).backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)


def test_an_output_eagers_backward_keeps_is_saved_itself_and_guarded_as_in_eager(frontend, partition):
    """tanh's backward reads tanh's result, which eager's autograd saves too: ember's backward reads the output
    itself rather than running the chain again. Gradients match eager's; an in-place change of such an output
    fails the backward as it does in eager, and one of an output neither backward reads does not."""
    def f(x, y):
        return (x.sin() * y.cos() + (x * 0.5).exp() * torch.erf(y)).tanh(), x.cos()

    x, y = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    compiled = compile_for_training(f, frontend, partition)

    def step(fn):  # the cos(x) output changed in place: both backwards run
        x.grad = y.grad = None
        t, c = fn(x, y)
        c.add_(1)
        ((t * t).sum() + c.sum()).backward()
        return x.grad, y.grad

    torch.testing.assert_close(step(compiled), step(f))
    for fn in (compiled, f):  # the tanh output changed in place: both backwards refuse
        t, c = fn(x, y)
        t.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            t.sum().backward()


def test_retain_graph_backward_twice(frontend, partition):
    def f(x):
        return (x.sin() * x).sum()

    x = torch.randn(5, requires_grad=True)
    out = compile_for_training(f, frontend, partition)(x)
    out.backward(retain_graph=True)
    out.backward()
    xr = x.detach().clone().requires_grad_()
    ref = f(xr)
    ref.backward(retain_graph=True)
    ref.backward()
    torch.testing.assert_close(x.grad, xr.grad)


def test_double_backward_gives_eagers_second_order_gradients(frontend):
    def f(x):
        return (x ** 3).sum()

    x = torch.randn(4, requires_grad=True)
    with ember.record_events() as rec:
        (g,) = torch.autograd.grad(ember.compile(f, options={"frontend": frontend})(x), x, create_graph=True)
        torch.testing.assert_close(g, 3 * x.detach() ** 2)
        g.sum().backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())
    assert [e.stage for e in rec.kinds("fallback")] == ["autograd"]  # reported: the kernels are not differentiable


def test_partition_report_is_logged(frontend):
    with ember.record_events() as rec:
        ember.compile(GeluMLP(), options={"frontend": frontend})(torch.randn(4, 32)).sum().backward()
    (event,) = [e for e in rec.events if e.kind == "partitioned"]
    assert "mincut" in event.message and event.source and "saved" in event.source.lower()


class TiedEmbeddings(nn.Module):
    """A table read twice (T5's shared encoder/decoder embedding, GPT-2's tied output layer): its gradient is two
    scatters into zeros and a sum, or a matmul plus a scatter; ember scatters into the other addend in place."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)

    def forward(self, a, b):
        h = self.emb(a).tanh() + self.emb(b)
        return h @ self.emb.weight.t()


def test_a_table_read_twice_gets_eagers_gradient(frontend, partition):
    model = TiedEmbeddings()
    twin = copy.deepcopy(model)
    compiled = compile_for_training(twin, frontend, partition)
    a, b = torch.randint(0, 50, (4, 12)), torch.randint(0, 50, (4, 12))
    a[0, :6] = 7  # a row hit many times: the scatter accumulates
    with ember.record_events() as rec:
        compiled(a, b).pow(2).mean().backward()
    model(a, b).pow(2).mean().backward()
    torch.testing.assert_close(twin.emb.weight.grad, model.emb.weight.grad, rtol=1e-4, atol=1e-5)
    assert not [e for e in rec.events if e.kind == "fallback"]


def test_an_embeddings_gradient_adds_its_rows_with_index_add(frontend, partition):
    """On the CPU lowering's `index-add-rows` makes autograd's accumulating index_put of the table's rows an
    index_add (a row at a time, where ATen's index_put adds an element at a time): repeated rows add up, the
    padding row gets none."""
    model = nn.Embedding(40, 24, padding_idx=3)
    twin = copy.deepcopy(model)
    compiled = compile_for_training(twin, frontend, partition)
    ids = torch.randint(0, 40, (3, 10))
    ids[0, :5], ids[1, :3] = 7, 3
    with ember.record_events() as rec:
        compiled(ids).tanh().sum().backward()
    model(ids).tanh().sum().backward()
    torch.testing.assert_close(twin.weight.grad, model.weight.grad)
    assert "index-add-rows" in [e.data["pass"] for e in rec.kinds("pass_applied")]
    assert not [e for e in rec.events if e.kind == "fallback"]


def test_cross_entropy_gradient_is_one_select_kernel_not_a_scatter(frontend, partition):
    """Autograd writes cross-entropy's gradient as `scatter_add(zeros, 1, target[:, None], g)`: ember lowers it as a
    select fused with the zero fill and the softmax's backward, no ATen scatter over the whole logits; ignored
    targets (-100) and label smoothing included."""
    logits, target = torch.randn(16, 50, requires_grad=True), torch.randint(0, 50, (16,))
    target[3] = -100

    def loss(x, t):
        return F.cross_entropy(x, t) + F.cross_entropy(x * 2, t, label_smoothing=0.1, reduction="sum")

    compiled = ember.compile(loss, options={"frontend": frontend, "partition": partition})
    with ember.record_events() as rec:
        got = compiled(logits, target)
        got.backward()
    grad, logits.grad = logits.grad, None
    loss(logits, target).backward()
    torch.testing.assert_close(grad, logits.grad)
    ops = [k.op for e in rec.kinds("kernels_generated") for k in ember_core.costs_of(e.get("range")).kernels
           if k.kind == "extern"]
    assert not [op for op in ops if "scatter" in op], ops
    assert not rec.kinds("fallback")


def test_a_scatter_index_out_of_range_raises_as_in_eager():
    def fn(x, i):
        return torch.zeros_like(x).scatter_add(1, i, x[:, :1]) * 2

    compiled, x, good = ember.compile(fn), torch.randn(4, 5), torch.tensor([[0], [4], [2], [1]])
    torch.testing.assert_close(compiled(x, good), fn(x, good))
    for bad in (5, -1):
        i = torch.tensor([[0], [bad], [2], [1]])
        with pytest.raises(RuntimeError, match="out of bounds"):
            fn(x, i)
        with pytest.raises(RuntimeError, match="out of bounds"):
            compiled(x, i)


_KINKS = torch.tensor([-4.0, -3.0, -1.0, 0.0, -0.0, 1.0, 3.0, 4.0, 6.0])
AT_KINKS = {
    # the value each op's gradient takes exactly at a kink or a 0/0 is eager's formula's, not the decomposition's
    "hardswish": (lambda x: F.hardswish(x), (_KINKS,)),
    "hardsigmoid": (lambda x: F.hardsigmoid(x), (_KINKS,)),
    "xlogy at 0, 0": (torch.xlogy, (torch.tensor([0.0, 0.0, 1.0, 2.0]), torch.tensor([0.0, 2.0, 0.0, 3.0]))),
    "xlog1py at x = 0": (torch.special.xlog1py, (torch.tensor([0.0, -0.0, 0.0, 0.0, 1.0, 2.0]),
                                                 torch.tensor([0.5, 2.0, -1.0, 0.0, -1.0, 3.0]))),
    "xlogy, xlog1py of a number at x = 0": (lambda x: torch.xlogy(x, 2.0) + torch.special.xlog1py(x, 0.5)
                                            + (x * 1).xlogy_(3.0) + torch.xlogy(0.0, x.abs()),
                                            (torch.tensor([0.0, -0.0, 1.0, 2.0]),)),
    "relu6": (lambda x: F.relu6(x), (_KINKS,)),
    "hardtanh": (lambda x: F.hardtanh(x, -3.0, 3.0), (_KINKS,)),
    "clamp": (lambda x: x.clamp(-1.0, 1.0), (_KINKS,)),
    "maximum at ties": (torch.maximum, (_KINKS, _KINKS.flip(0))),
    "abs and sqrt at 0": (lambda x: x.abs() + x.abs().sqrt(), (_KINKS,)),
    # the std of a constant row is 0: eager's std_backward gives such a row the gradient 0, the derivative of
    # sqrt(var) is 0 · inf = NaN there (found by tests/training_fuzz)
    "std of constant rows": (lambda x: x.std(1) + torch.std_mean(x, 1)[0] * 2 + x.std(1, correction=0) * 3
                             + x[0].std() + torch.std_mean(x[2])[0], (torch.tensor(
                                 [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 2.0, 3.0], [-2.0, -2.0, -2.0, -2.0]]),)),
    # an inf or 0/0 in the branch a decomposition's where does not take (NaN gradients), or the reverse
    "celu, mish, softplus at large x": (lambda x: F.celu(x) + F.mish(x) + F.softplus(x, beta=3, threshold=0.2),
                                        (torch.tensor([-1.0, 0.0, 20.0, 100.0, float("inf")]),)),
    "sinc at 0": (torch.sinc, (_KINKS,)),
    "entr at 0 and inf": (torch.special.entr, (torch.tensor([0.0, 0.5, 1.0, float("inf")]),)),
    "logit outside [0, 1]": (torch.logit, (torch.tensor([-1.0, -0.5, 0.25, 0.5, 2.0]),)),
    # a margin met exactly (z = margin - x[y] + x[i] = 0): eager's backward counts only z > 0; torch's Autograd
    # kernel for the trace (a decomposition through clamp_min) counts z = 0 too
    "multi_margin_loss at its margin": (lambda x: F.multi_margin_loss(x, torch.tensor([1, 0, 3]))
                                        + F.multi_margin_loss(x, torch.tensor([2, 2, 0]), p=2, margin=0.5),
                                        (torch.tensor([[0.0, 1.0, 0.0, 0.5], [1.0, 0.0, 1.0, 1.5],
                                                       [0.0, 0.5, 1.0, 1.0]]),)),
    "multilabel_margin_loss at its margin": (lambda x: F.multilabel_margin_loss(
        x, torch.tensor([[1, 3, -1, 0], [0, -1, 2, 2], [3, 2, 1, 0]])), (torch.tensor(
            [[0.0, 1.0, 0.0, 0.5], [1.0, 0.0, 1.0, 1.5], [0.0, 0.5, 1.0, 1.0]]),)),
    # eager's kernels add a margin term only where it is > 0, so a NaN score drops out of the loss
    "margin losses skip a NaN score": (lambda x: F.multi_margin_loss(x, torch.tensor([1, 0, 3]), reduction="none")
                                       + F.multilabel_margin_loss(x, torch.tensor([[1, -1, 0, 0], [0, 2, -1, 1],
                                                                                   [3, -1, 1, 0]]), reduction="none"),
                                       (torch.tensor([[0.0, 1.0, float("nan"), 0.5], [1.0, 0.0, 1.0, 1.5],
                                                      [0.0, 0.5, 1.0, 1.0]]),)),
    # a vector's unreduced multilabel loss is 0-d (torch's trace decomposition made it shape [1])
    "multilabel_margin_loss of a vector, unreduced": (lambda x: F.multilabel_margin_loss(
        x, torch.tensor([1, 3, -1, 0]), reduction="none"), (torch.tensor([0.0, 1.0, 0.0, 0.5]),)),
    "softshrink at NaN": (lambda x: F.softshrink(x, 0.5),
                          (torch.tensor([float("nan"), -0.5, 0.5, 0.0, 1.0, -float("inf")]),)),
    # a probability of exactly 0 or 1 (a saturated float32 sigmoid: sigmoid(17) == 1): eager clamps the log at
    # -100 and the derivative's denominator at 1e-12, finite; the decomposition's derivative is 0 · inf = NaN
    "binary_cross_entropy at 0 and 1": (lambda p, y: (F.binary_cross_entropy(p, y) + F.binary_cross_entropy(
        p, y, torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0, 1.0]), reduction="sum") * 1e-12
        + F.binary_cross_entropy(torch.sigmoid(p * 40 - 20), y)),
                                        (torch.tensor([0.0, 1.0, 0.5, 1.0, 0.0, 0.25]),
                                         torch.tensor([0.0, 1.0, 0.3, 0.0, 1.0, 0.5]))),
}


@pytest.mark.parametrize("case", list(AT_KINKS))
def test_gradients_at_kinks_are_eagers(case, frontend):
    fn, inputs = AT_KINKS[case]
    got_in = [x.clone().requires_grad_() for x in inputs]
    want_in = [x.clone().requires_grad_() for x in inputs]
    got = ember.compile(fn, options={"frontend": frontend})(*got_in)
    want = fn(*want_in)
    torch.testing.assert_close(got, want, equal_nan=True)
    got.sum().backward()
    want.sum().backward()
    for g, w in zip(got_in, want_in):
        torch.testing.assert_close(g.grad, w.grad, equal_nan=True)


@pytest.mark.parametrize("view", [False, True])
def test_a_backward_in_the_interpreter_after_a_lowering_failure_gives_eagers_gradient_of_a_max(monkeypatch, view):
    """amax's gradient compares `v == amax(v)`. The partitioner recomputed `v` in the backward; when the backward's
    lowering failed and it ran in the interpreter codegen (ATen's cos, not the C++ kernel's), `v` could be one bit
    off the forward's, no element equalled the saved maximum, and the gradient was NaN (1 call in 3). Now `v` is
    saved (`_mincut._compared_in_backward`), and so is its base where the comparison reads a view of it."""
    from ember_lowering.graph_passes.cat_slice_scatters import CatSliceScatters

    def fail_backwards(self, graph):
        if graph.name.endswith("_backward"):
            raise RuntimeError("a lowering failure, for this test")
        return graph

    def fn(x):
        v = torch.sqrt(x.cos().abs() + 0.15)
        v = v.reshape(5, 2, 7) if view else v
        return v.amax(-1, keepdim=True).expand(v.shape) * 0.35 + v * 0.45

    monkeypatch.setattr(CatSliceScatters, "run", fail_backwards)
    compiled = ember.compile(fn, options={"frontend": "trace"})
    with ember.record_events() as rec, pytest.warns(ember.FallbackWarning, match="lowering failed"):
        for seed in range(8):
            torch.manual_seed(seed)
            x_eager = torch.randn(10 if view else 5, 7, requires_grad=True)
            x_ember = x_eager.detach().clone().requires_grad_()
            fn(x_eager).sum().backward()
            compiled(x_ember).sum().backward()
            torch.testing.assert_close(x_ember.grad, x_eager.grad)
    assert [e.data["cause"] for e in rec.kinds("fallback")] == ["lowering"]


def test_batch_norm_of_one_image_under_a_transposed_gradient_is_the_true_gradient():
    """XCiT and EfficientFormer flatten and transpose a batch norm's output (`x.flatten(2).transpose(1, 2)`); for a
    batch of one image the gradient reaching the norm then has channels-last strides while its input does not, and
    eager's CPU batch-norm backward (torch 2.11-2.14, float32 and float64) gives wrong weight and bias gradients for
    that pair. ember's must be the true ones: eager's with that gradient made contiguous first (a view changes
    nothing of the loss, so also the same as without the views)."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)

    def step(bn, run, contiguous=False):
        y = run(x)
        if contiguous:
            y.register_hook(lambda g: g.contiguous())
        y.flatten(2).transpose(1, 2).pow(2).mean().backward()
        return bn.weight.grad, bn.bias.grad

    truth, compiled = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    want = step(truth, truth, contiguous=True)
    got = step(compiled, ember.compile(compiled))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1.3e-6, atol=1e-6)
