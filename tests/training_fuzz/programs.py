"""Random training programs: a program is a list of steps over a list of values (the inputs first); each step reads
values by index and appends one of shape (B, N) (`fit` reshapes or tiles what a step makes back to it), so any
step can read any earlier value. The same program runs as a float64 module (the reference) and a float32 one."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def _index(seed: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A fixed index tensor in [0, high) (the program's constant: the same in every run of the seed), computed
    without a generator so that it traces into the graph (as integer ops) instead of breaking it."""
    count = math.prod(shape)
    return ((torch.arange(count) * 37 + seed % 1009) * 13 % 1013 % high).reshape(shape)


def _autocast_matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return (a @ w).to(a.dtype)


# Inputs are kept inside each op's domain (abs, clamps), so that the reference is finite where eager's is.
UNARY: dict[str, Callable] = {
    "exp": lambda a: torch.exp(a.clamp(max=4)), "log": lambda a: torch.log(a.abs() + 1),
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "gelu": F.gelu, "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"), "silu": F.silu, "softplus": F.softplus,
    "sqrt": lambda a: torch.sqrt(a.abs() + 0.1), "rsqrt": lambda a: torch.rsqrt(a.abs() + 1), "abs": torch.abs,
    "neg": torch.neg, "erf": torch.erf, "log1p": lambda a: torch.log1p(a.abs()), "square": lambda a: a * a,
    "cube": lambda a: a.pow(3), "clamp": lambda a: a.clamp(-0.5, 0.7), "leaky_relu": F.leaky_relu, "elu": F.elu,
    "hardswish": F.hardswish, "mish": F.mish, "hardtanh": F.hardtanh, "reciprocal": lambda a: 1 / (a.abs() + 1),
    "atan": torch.atan, "expm1": lambda a: torch.expm1(a.clamp(max=3)), "logsigmoid": F.logsigmoid,
    "selu": F.selu, "tanhshrink": F.tanhshrink, "softsign": F.softsign, "celu": F.celu, "asinh": torch.asinh,
    "sign_times": lambda a: torch.sign(a) * a, "frac": torch.frac, "remainder": lambda a: torch.remainder(a, 0.7),
    "fmod": lambda a: torch.fmod(a, 0.6), "straight_through_round": lambda a: a + (torch.round(a * 4) / 4 - a).detach(),
    "bf16_round_trip": lambda a: a.to(torch.bfloat16).to(a.dtype),
    "where_scalar": lambda a: torch.where(a > 0.3, a, 0.0), "masked_fill": lambda a: a.masked_fill(a < -0.5, 0.25),
    "cosh": lambda a: torch.cosh(a.clamp(-3, 3)), "erfinv": lambda a: torch.erfinv(torch.tanh(a) * 0.9),
    "digamma": lambda a: torch.digamma(a.abs() + 1), "lgamma": lambda a: torch.lgamma(a.abs() + 0.5),
    "logit": lambda a: torch.logit(torch.sigmoid(a), eps=1e-6), "rrelu_eval": lambda a: F.rrelu(a, training=False),
    "times_rolled_tanh": lambda a: a * torch.tanh(a.roll(1, 1)),
}

BINARY: dict[str, Callable] = {
    "add": torch.add, "mul": torch.mul, "sub": torch.sub, "div": lambda a, b: a / (b.abs() + 1),
    "maximum": torch.maximum, "minimum": torch.minimum, "where": lambda a, b: torch.where(a > 0, a, b),
    "atan2": torch.atan2, "hypot": torch.hypot, "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "clamp_between": lambda a, b: torch.clamp(a, min=b - 0.5, max=b + 0.5),
}


def reductions(dim: int) -> dict[str, Callable]:
    """Reductions and scans along `dim`, each keeping the dim (a scan keeps the shape)."""
    return {
        "sum": lambda a: a.sum(dim, keepdim=True), "mean": lambda a: a.mean(dim, keepdim=True),
        "amax": lambda a: a.amax(dim, keepdim=True), "amin": lambda a: a.amin(dim, keepdim=True),
        "softmax": lambda a: a.softmax(dim), "log_softmax": lambda a: a.log_softmax(dim),
        "var": lambda a: a.var(dim, keepdim=True), "std": lambda a: a.std(dim, keepdim=True),
        "var_mean": lambda a: sum(torch.var_mean(a, dim, keepdim=True, correction=0)),
        "logsumexp": lambda a: a.logsumexp(dim, keepdim=True), "norm": lambda a: a.norm(dim=dim, keepdim=True),
        "prod": lambda a: (torch.tanh(a) + 1.5).prod(dim, keepdim=True), "nansum": lambda a: a.nansum(dim, True),
        "max": lambda a: a.max(dim, keepdim=True).values, "min": lambda a: a.min(dim, keepdim=True)[0],
        "median": lambda a: a.median(dim, keepdim=True).values,
        "argmax_gather": lambda a: a.gather(dim, a.argmax(dim, keepdim=True)),
        "cumsum": lambda a: a.cumsum(dim), "cumprod": lambda a: (torch.tanh(a) * 0.5 + 1).cumprod(dim),
        "cummax": lambda a: a.cummax(dim).values, "logcumsumexp": lambda a: a.logcumsumexp(dim),
        "sort": lambda a: a.sort(dim).values, "top2": lambda a: a.topk(2, dim).values.sum(dim, keepdim=True),
    }


# Steps that read two values and the module (its parameters: `w` (N, N), `lw` and `lb` (N,), `k` a 3-tap kernel,
# `kb` its bias) and a seed of their own for index tensors.
MIXED: dict[str, Callable] = {
    "gather": lambda m, a, b, s: a.gather(1, _index(s, a.shape[1], a.shape)),
    "index_select": lambda m, a, b, s: a.index_select(1, _index(s, a.shape[1], (a.shape[1],))),
    "scatter_add": lambda m, a, b, s: a.scatter_add(1, _index(s, a.shape[1], a.shape), b),
    "index_add": lambda m, a, b, s: a.index_add(0, _index(s, a.shape[0], (a.shape[0],)), b),
    "index_put_accumulate": lambda m, a, b, s: a.index_put((_index(s, a.shape[0], (3,)),), b[:3], accumulate=True),
    "masked_scatter": lambda m, a, b, s: a.masked_scatter(b > 0, a * 2),
    "embedding": lambda m, a, b, s: F.embedding(_index(s, a.shape[1], (a.shape[0],)), m.w) + a,
    "avg_pool": lambda m, a, b, s: F.avg_pool1d(a.unsqueeze(1), 3, 1, 1).squeeze(1),
    "max_pool": lambda m, a, b, s: F.max_pool1d(a.unsqueeze(1), 3, 1, 1).squeeze(1),
    "conv1d": lambda m, a, b, s: F.conv1d(a.unsqueeze(1), m.k, padding=1).squeeze(1),
    "conv1d_dilated": lambda m, a, b, s: F.conv1d(a.unsqueeze(1), m.k, m.kb, padding=2, dilation=2).squeeze(1),
    "batch_norm": lambda m, a, b, s: F.batch_norm(a, None, None, m.lw, m.lb, training=True),
    "batch_norm_running": lambda m, a, b, s: F.batch_norm(
        a, torch.zeros(a.shape[1], dtype=a.dtype), torch.ones(a.shape[1], dtype=a.dtype), m.lw, m.lb,
        training=True, momentum=0.1),
    "group_norm": lambda m, a, b, s: F.group_norm(a.unsqueeze(2), 1, m.lw, m.lb).squeeze(2),
    "layer_norm": lambda m, a, b, s: F.layer_norm(a, (a.shape[1],), m.lw, m.lb),
    "rms_norm": lambda m, a, b, s: F.rms_norm(a, (a.shape[1],), m.lw),
    "interpolate": lambda m, a, b, s: F.interpolate(a.unsqueeze(1), scale_factor=2, mode="linear").squeeze(1)[:, ::2],
    "einsum": lambda m, a, b, s: torch.einsum("bi,bj->bij", a, b).sum(1),
    "bmm": lambda m, a, b, s: torch.bmm(a.unsqueeze(2), b.unsqueeze(1)).mean(2),
    "matmul": lambda m, a, b, s: a @ m.w,
    "addmm": lambda m, a, b, s: torch.addmm(m.lb, a, m.w),
    "linear_relu": lambda m, a, b, s: F.relu(F.linear(a, m.w, m.lb)),
    "autocast_matmul": lambda m, a, b, s: _autocast_matmul(a, m.w),
    "outer_max": lambda m, a, b, s: (a.unsqueeze(2) * b.unsqueeze(1)).amax(1),
    "triangles": lambda m, a, b, s: torch.tril(a, -1) + torch.triu(b, 2),
    "diff": lambda m, a, b, s: F.pad(torch.diff(a, dim=1), (1, 0)),
    "cross_entropy": lambda m, a, b, s: F.cross_entropy(a, _index(s, a.shape[1], (a.shape[0],)),
                                                        reduction="none").unsqueeze(1) + a,
    "soft_cross_entropy": lambda m, a, b, s: F.cross_entropy(a, b.softmax(1)).expand(a.shape) + 0,
    "mse": lambda m, a, b, s: F.mse_loss(a, b, reduction="none"),
    "smooth_l1": lambda m, a, b, s: F.smooth_l1_loss(a, b, reduction="none", beta=0.5),
    "bce_with_logits": lambda m, a, b, s: F.binary_cross_entropy_with_logits(a, torch.sigmoid(b), reduction="none"),
    "kl_div": lambda m, a, b, s: F.kl_div(a.log_softmax(1), b.log_softmax(1), reduction="none", log_target=True),
    "normalize": lambda m, a, b, s: F.normalize(a, dim=1),
    "cosine_similarity": lambda m, a, b, s: F.cosine_similarity(a, b, dim=1).unsqueeze(1) * a,
    "attention": lambda m, a, b, s: F.scaled_dot_product_attention(a[None, None], b[None, None], a[None, None])[0, 0],
    "unfold_prod": lambda m, a, b, s: a.unfold(1, 2, 1).prod(2).sum(1, keepdim=True) + a,
    "repeat_interleave": lambda m, a, b, s: a.repeat_interleave(2, dim=1)[:, 1::2],
    "rotate_left": lambda m, a, b, s: torch.cat([a.narrow(1, 1, a.shape[1] - 1), a[:, :1]], 1),
    "column_sums": lambda m, a, b, s: (a * b).sum(0, keepdim=True) + b,
    "transpose": lambda m, a, b, s: a.t().reshape(a.shape) * 1.0 if a.shape[0] != a.shape[1] else a.t(),
    "flip": lambda m, a, b, s: a.flip(1), "roll": lambda m, a, b, s: a.roll(2, 1),
    "first_column": lambda m, a, b, s: a[:, :1].expand(a.shape),
    "even_columns_padded": lambda m, a, b, s: F.pad(a[:, ::2], (0, a.shape[1] - (a.shape[1] + 1) // 2)),
    "half_and_half": lambda m, a, b, s: torch.cat([a[:, : a.shape[1] // 2], b[:, a.shape[1] // 2:]], 1),
    "shifted_add": lambda m, a, b, s: F.pad(a[:, :-1] + b[:, 1:], (0, 1)),
    "running_mean": lambda m, a, b, s: a - m.running.mul_(0.9).add_(a.detach().mean(0), alpha=0.1),
}


# Steps that also read the float `scale` the module is called with (`--floats`: it changes every training step, so
# that Dynamo and the trace frontend make it an input read with `.item()`), as ops take a Python number: in
# arithmetic, as an op's scalar argument, as an ATen call's alpha.
SCALED: dict[str, Callable] = {
    "mul": lambda m, a, b, s: a * s, "div": lambda m, a, b, s: a / s, "rsub": lambda m, a, b, s: s - a,
    "arithmetic": lambda m, a, b, s: a * (s * s - s / 2) + (-s),
    "add_alpha": lambda m, a, b, s: torch.add(a, b, alpha=s), "sub_alpha": lambda m, a, b, s: torch.sub(a, b, alpha=s),
    "elu": lambda m, a, b, s: F.elu(a, alpha=s), "celu": lambda m, a, b, s: F.celu(a, alpha=s),
    "softplus": lambda m, a, b, s: F.softplus(a, beta=s + 0.5), "clamp": lambda m, a, b, s: a.clamp(-s, s),
    "hardtanh": lambda m, a, b, s: F.hardtanh(a, -s, s), "leaky_relu": lambda m, a, b, s: F.leaky_relu(a, s * 0.1),
    "lerp": lambda m, a, b, s: torch.lerp(a, b, s * 0.5), "addcmul": lambda m, a, b, s: torch.addcmul(a, a, b, value=s),
    "addcdiv": lambda m, a, b, s: torch.addcdiv(a, a, b.abs() + 1, value=s),
    "where": lambda m, a, b, s: torch.where(a > s - 0.5, a, b), "pow": lambda m, a, b, s: (a.abs() + 0.1) ** s,
    "scalar_pow": lambda m, a, b, s: torch.pow(s + 0.5, a.clamp(-3, 3)),
    "masked_fill": lambda m, a, b, s: a.masked_fill(a < -s, s), "softshrink": lambda m, a, b, s: F.softshrink(a, s / 2),
    "threshold": lambda m, a, b, s: F.threshold(a, s - 0.5, -s),
    "softmax_temperature": lambda m, a, b, s: (a / s).softmax(1),
    "full_like": lambda m, a, b, s: a + torch.full_like(a, s),
    "addmm": lambda m, a, b, s: torch.addmm(m.lb, a, m.w, alpha=s, beta=1 - s),
}
SCALES = (0.5, 0.75, 1.25, 0.3, 0.9)  # `scale` at each training step under `--floats`


# Steps at the edges of ops' int arguments (`--edges`): starts and indices counted from the end and from before the
# start, steps, shifts, splits and diagonals past the width, pads that cut, bounds that cross. Eager defines each; a
# lowering that normalizes an argument must do it as ATen does (the gradient of `x[:, -3:]` of 2 columns was written
# one column off).
EDGES: dict[str, Callable] = {
    "slice_from_before_the_start": lambda a, b: torch.cat([b[:, :1], a[:, -(a.shape[1] + 3):-1]], 1),
    "columns_from_before_the_start": lambda a, b: a[:, -(a.shape[1] + 5):] * b,
    "rows_from_before_the_start": lambda a, b: a[-(a.shape[0] + 2):] * 2 + b,
    "slice_scatter_from_before_the_start": lambda a, b: torch.slice_scatter(a, b[:, :2] * 3, 1, -(a.shape[1] + 4), 2),
    "step_past_the_width": lambda a, b: F.pad(a[:, 1::a.shape[1] + 1].exp(), (0, a.shape[1] - 1)),
    "narrow_from_the_end": lambda a, b: F.pad(a.narrow(1, -3, 3), (a.shape[1] - 3, 0)),
    "column_from_the_end": lambda a, b: a[:, -2:-1] * b,
    "indices_from_the_end": lambda a, b: a[:, [-1, 0, -2]],
    "roll_past_the_width": lambda a, b: a.roll(a.shape[1] + 2, 1) - a.roll(-1, 0),
    "diagonals_past_the_width": lambda a, b: a.tril(1 - a.shape[1]) + a.triu(a.shape[1] - 1) + b.tril(a.shape[1] + 1),
    "pads_that_cut": lambda a, b: F.pad(a, (-2, 2)) + F.pad(b, (1, -1)),
    "uneven_split": lambda a, b: torch.cat([p * (i + 1) for i, p in enumerate(a.split(3, 1))], 1),
    "more_chunks_than_columns": lambda a, b: torch.cat([p * (i + 1) for i, p in
                                                        enumerate(a.chunk(a.shape[1] + 2, 1))], 1),
    "split_past_the_width": lambda a, b: torch.cat([p * (i + 1) for i, p in
                                                    enumerate(a.tensor_split([2, a.shape[1] + 4], 1))], 1),
    "crossed_bounds": lambda a, b: a.clamp(min=0.5, max=-0.5) + b,
    "window_step_past_the_width": lambda a, b: a.unfold(1, 2, a.shape[1]),
}


def _in_place(kind: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a = a.clone()
    if kind == "mul_":
        a.mul_(b)
    elif kind == "add_to_columns":
        a[:, 1:3] += b[:, :2]
    elif kind == "relu_":
        a.relu_()
    elif kind == "clamp_":
        a.clamp_(min=-0.2)
    else:  # "assign_column"
        a[:, 0] = b[:, 1] * 2
    return a


IN_PLACE = ("mul_", "add_to_columns", "relu_", "clamp_", "assign_column")

# step kind → (weight, how to draw its arguments after the two operand indices)
KINDS = {"unary": 6, "binary": 5, "reduction": 3, "in_place": 2, "mixed": 6}


# How an input is laid out in memory (its values are the same): its own contiguous tensor, the transpose of a
# contiguous (N, B) one, every other column of a (B, 2N) one, a block at an offset of a larger one, or a row
# expanded to B rows (stride 0; such an input takes no gradient of its own shape, so its gradient is compared summed).
LAYOUTS = ("contiguous", "transposed", "strided", "offset", "expanded")


@dataclass(frozen=True)
class Program:
    seed: int
    inputs: int
    batch: int
    width: int
    steps: tuple[tuple, ...]
    layouts: tuple[str, ...] = ()

    def make_inputs(self, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
        """The program's inputs, each in its layout: leaves of that layout, with the same values in every dtype."""
        g = torch.Generator().manual_seed(self.seed)
        b, n = self.batch, self.width
        made = []
        for layout in self.layouts or ("contiguous",) * self.inputs:
            if layout == "transposed":
                x = torch.randn(n, b, generator=g).to(dtype).t()
            elif layout == "strided":
                x = torch.randn(b, 2 * n, generator=g).to(dtype)[:, ::2]
            elif layout == "offset":
                x = torch.randn(b + 1, n + 3, generator=g).to(dtype)[1:, 2:n + 2]
            elif layout == "expanded":
                x = torch.randn(1, n, generator=g).to(dtype).expand(b, n)
            else:
                x = torch.randn(b, n, generator=g).to(dtype)
            made.append(x)
        return made

    def __str__(self) -> str:
        layouts = f", {', '.join(self.layouts)}" if self.layouts else ""
        lines = [f"seed {self.seed}: {self.inputs} input(s) of ({self.batch}, {self.width}){layouts}"]
        for k, step in enumerate(self.steps):
            reads = step[2:3] if step[0] in ("unary", "reduction") else step[2:4]
            extra = {"reduction": f", dim={step[-1]}", "binary": ", row of the second" if step[-1] else ""}
            lines.append(f"  v{self.inputs + k} = {step[0]} {step[1]}(" + ", ".join(f"v{i}" for i in reads)
                         + extra.get(step[0], "") + ")")
        return "\n".join(lines)


def generate(seed: int) -> Program:
    """The program of `seed`: the same on every machine and every run."""
    rng = random.Random(seed)
    inputs = rng.randint(1, 3)
    steps = []
    for k in range(rng.randint(3, 12)):
        kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
        a, b = rng.randrange(inputs + k), rng.randrange(inputs + k)
        if kind == "unary":
            steps.append((kind, rng.choice(sorted(UNARY)), a, a))
        elif kind == "binary":
            steps.append((kind, rng.choice(sorted(BINARY)), a, b, rng.random() < 0.3))  # b broadcast from a row
        elif kind == "reduction":
            steps.append((kind, rng.choice(sorted(reductions(0))), a, a, rng.choice([0, 1, -1])))
        elif kind == "in_place":
            steps.append((kind, rng.choice(IN_PLACE), a, b))
        else:
            steps.append((kind, rng.choice(sorted(MIXED)), a, b, rng.randrange(1 << 30)))
    layouts = tuple(rng.choices(LAYOUTS, [6, 1, 1, 1, 1])[0] for _ in range(inputs))
    return Program(seed, inputs, rng.choice([3, 4, 5]), rng.choice([7, 8, 16, 17, 33]), tuple(steps), layouts)


def with_floats(program: Program) -> Program:
    """The program with two to four `SCALED` steps after its own (the program of a seed without `--floats` stays
    what it was)."""
    return _with_steps(program, "scaled", SCALED, random.Random(program.seed * 7919 + 17))


def with_edges(program: Program) -> Program:
    """The program with two to four `EDGES` steps after its own (as `with_floats`)."""
    return _with_steps(program, "edge", EDGES, random.Random(program.seed * 6007 + 29))


def _with_steps(program: Program, kind: str, table: dict[str, Callable], rng: random.Random) -> Program:
    """Two to four steps of `kind` from `table` after the program's own, drawn from `rng`, a generator of their own."""
    steps = list(program.steps)
    for _ in range(rng.randint(2, 4)):
        known = program.inputs + len(steps)
        steps.append((kind, rng.choice(sorted(table)), rng.randrange(known), rng.randrange(known)))
    return dataclasses.replace(program, steps=tuple(steps))


def fit(x: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """`x` as a (B, N) tensor: itself, its first B*N elements, or its elements repeated."""
    if x.shape == shape:
        return x
    flat, size = x.reshape(-1), shape[0] * shape[1]
    if flat.numel() < size:
        flat = flat.repeat(-(-size // flat.numel()))
    return flat[:size].reshape(shape)


LOSS_WEIGHTS = (0.3, 0.4, 0.5)


class Module(torch.nn.Module):
    """A program as a module: returns a weighted sum of its last three values (the loss) and its last value."""

    def __init__(self, program: Program):
        super().__init__()
        self.steps = program.steps
        n = program.width
        g = torch.Generator().manual_seed(program.seed)
        self.w = torch.nn.Parameter(torch.randn(n, n, generator=g) / math.sqrt(n))
        self.lw = torch.nn.Parameter(torch.randn(n, generator=g))
        self.lb = torch.nn.Parameter(torch.randn(n, generator=g))
        self.k = torch.nn.Parameter(torch.randn(1, 1, 3, generator=g))
        self.kb = torch.nn.Parameter(torch.randn(1, generator=g))
        self.register_buffer("running", torch.zeros(n))

    def forward(self, *inputs: torch.Tensor, scale: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
        last = self.last_values(*inputs, scale=scale)
        loss = torch.stack([v.sum() * w for v, w in zip(last, LOSS_WEIGHTS)]).sum()
        return loss, last[-1]

    def last_values(self, *inputs: torch.Tensor, scale: float = 0.5) -> list[torch.Tensor]:
        """The program's last three values, which the loss sums (weighted by `LOSS_WEIGHTS`); `scale`: the float
        the `SCALED` steps read."""
        values = list(inputs)
        shape = tuple(inputs[0].shape)
        for step in self.steps:
            kind, name, a, b = step[0], step[1], fit(values[step[2]], shape), fit(values[step[3]], shape)
            if kind == "unary":
                y = UNARY[name](a)
            elif kind == "binary":
                y = BINARY[name](a, b[:1] if step[4] else b)
            elif kind == "reduction":
                y = reductions(step[4])[name](a).expand(shape) + 0  # the reduced value, broadcast and stored
            elif kind == "in_place":
                y = _in_place(name, a, b)
            elif kind == "scaled":
                y = SCALED[name](self, a, b, scale)
            elif kind == "edge":
                y = EDGES[name](a, b)
            else:
                y = MIXED[name](self, a, b, step[4]).to(a.dtype)
            values.append(fit(y, shape))
        return values[len(inputs):][-3:]
