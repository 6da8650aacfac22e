"""The loop IR: frozen, slotted dataclasses over one closed op set.

A `KernelPlan` runs `steps` in order over named `buffers`. A step is a `Kernel` (a loop nest this package
generated) or an `Extern` (a call of an ATen op). A kernel iterates over `dims`: `i*` dims are the outer,
parallel loops; `r*` dims are reduction dims, iterated by each `Loop` block of the body. The body is a sequence
of `Instr`s at outer level and `Loop` blocks (never nested). Values are SSA names `t0, t1, ...`:

- a value defined at outer level is visible in every later statement;
- a value defined inside a `Loop` is visible only inside that loop, except the results of `reduce_*`
  instructions, which are outer values, visible after the loop ends.

Loads and stores address a buffer by its logical index, one sympy expression per buffer dim, over the kernel's
dim variables, the plan's symbols and (for indirect indexing) integer SSA values of the body. A buffer's layout
(`stride`, `offset`, in elements) says where that element lives; `flat_index` in `_indexing.py` computes it.
A `local` buffer is one row of scratch for one kernel: a later loop of the kernel reads back what an earlier
loop stored (`stash-values` makes them), indexed by r-dim variables only.

What a codegen does with a plan (`PlanInterpreter` is the executable statement of it):
- symbols: read each off the input shapes and strides where it appears bare (`PlanInterpreter.bindings`).
- buffers: `input`s are the call's tensors as given, `constant`s the graph's constants by name. A `temp` or
  `output` that a kernel writes is allocated with its shape and strides; a `temp` with a `base` lives in that
  buffer's storage instead. An extern's results are the tensors the ATen op returns. A `view` is
  `as_strided(base tensor, shape, stride, base's storage offset + offset)`.
- externs: call the op; `Ref` arguments are buffer tensors, `Sym` ones ints, tuples lists. The plan records the
  layout the graph traced for each result; a codegen that addresses results by that layout checks it.
- kernels: the i-dims are independent iterations (parallelize them); each `Loop` runs all r-dims, row-major.
  A `local` lives in the iteration of the i-dims (each has its own copy, of the buffer's static shape: a stack
  array in C++, registers or shared memory on a GPU when the row fits a block) and holds what that iteration
  stored; nothing outside the kernel sees it. A codegen that cannot keep one calls `recompute_locals`
  (loop_passes/stash_values.py), which puts the computation back where the value is loaded.
  Index expressions are integers; `floor` and `Mod` follow Python (floor division, remainder of the divisor's
  sign). A masked load must not touch memory where its mask is false. float16/bfloat16 values are only
  loaded, stored, cast, selected (`where`) or constant: all arithmetic is in float32 or wider.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import sympy
from ember_core import SHORT_DTYPE_NAMES, Ref, Symbol, to_dtype

from ._open_enum import OpenEnum

# ---------------------------------------------------------------------------------------------- dtypes

# Short names in text are ember-core's (`f32`). Kernels compute with the dtypes below; the others only pass
# through externs.
DTYPE_SHORT: dict[str, str] = dict(SHORT_DTYPE_NAMES)
KERNEL_DTYPES: dict[str, str] = {name: DTYPE_SHORT[name] for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")}
DTYPE_LONG: dict[str, str] = {v: k for k, v in DTYPE_SHORT.items()}
FLOAT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})
INT_DTYPES = frozenset({"int64", "int32", "int16", "int8", "uint8"})
ITEMSIZE = {name: to_dtype(name).itemsize for name in DTYPE_SHORT}

NAN = float("nan")  # the one NaN object: consts holding it compare equal, so parse(print(plan)) == plan


def opmath(dtype: str) -> str:
    """The dtype a kernel computes in: float16 and bfloat16 are computed in float32."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def scalar_of(value: Any, dtype: str) -> int | float | bool:
    """A Python scalar of the kind `dtype` holds (NaN is always the `NAN` object)."""
    if dtype == "bool":
        return bool(value)
    if dtype in FLOAT_DTYPES:
        value = float(value)
        return NAN if math.isnan(value) else value
    return int(value)


# ---------------------------------------------------------------------------------------------- ops


class Op(metaclass=OpenEnum):
    """Every instruction of the loop IR, interned by its text name: ops compare by identity, as enum members do.
    Grouped by kind; the sets below say what each kind needs, `_op_semantics.py` what each pointwise op computes."""

    __slots__ = ("name", "value")
    _members: dict[str, Op]

    @classmethod
    def _add(cls, name: str, value: str) -> Op:
        if value in cls._members or name in vars(cls):
            raise ValueError(f"the loop IR already has an op {value!r} ({name})")
        op = object.__new__(cls)
        object.__setattr__(op, "name", name)
        object.__setattr__(op, "value", value)
        cls._members[value] = op
        type.__setattr__(cls, name, op)
        return op

    @classmethod
    def _remove(cls, op: Op) -> None:
        del cls._members[op.value]
        type.__delattr__(cls, op.name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("an Op is immutable")

    def __repr__(self) -> str:
        return f"<Op.{self.name}: {self.value!r}>"

    def __hash__(self) -> int:
        return hash(self.value)

    def __reduce__(self):
        return Op, (self.value,)

    def __copy__(self) -> Op:
        return self

    def __deepcopy__(self, memo: dict) -> Op:
        return self


    # memory
    LOAD = "load"
    STORE = "store"
    # leaves
    CONST = "const"
    INDEX = "index"  # the value of an index expression (an integer)
    # unary arithmetic
    NEG = "neg"
    ABS = "abs"
    RECIPROCAL = "reciprocal"
    SIGN = "sign"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"  # half to even
    TRUNC = "trunc"
    # unary transcendental (float only)
    EXP = "exp"
    EXP2 = "exp2"
    EXPM1 = "expm1"
    LOG = "log"
    LOG2 = "log2"
    LOG10 = "log10"
    LOG1P = "log1p"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    TANH = "tanh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    ERF = "erf"
    ERFC = "erfc"
    ERFINV = "erfinv"
    LGAMMA = "lgamma"
    SIGMOID = "sigmoid"
    # unary predicates (bool result)
    ISNAN = "isnan"
    ISINF = "isinf"
    SIGNBIT = "signbit"
    # logical and bitwise not
    NOT = "not"
    BITNOT = "bitnot"
    # binary arithmetic
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"  # true division (float)
    FLOORDIV = "floordiv"
    TRUNCDIV = "truncdiv"
    MOD = "mod"  # Python-style remainder (sign of the divisor), as torch.remainder
    FMOD = "fmod"  # C-style remainder (sign of the dividend), as torch.fmod
    POW = "pow"
    MAXIMUM = "maximum"  # propagates NaN
    MINIMUM = "minimum"  # propagates NaN
    ATAN2 = "atan2"
    COPYSIGN = "copysign"
    # binary logical (bool) and bitwise (int or bool)
    AND = "and"
    OR = "or"
    XOR = "xor"
    BITAND = "bitand"
    BITOR = "bitor"
    BITXOR = "bitxor"
    LSHIFT = "lshift"
    RSHIFT = "rshift"
    # comparisons (bool result)
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    # select and conversion
    WHERE = "where"
    CAST = "cast"  # as torch's Tensor.to(dtype); `implicit` (its value True): see `IMPLICIT_CAST`
    # reductions over the kernel's r-dims (only inside a Loop)
    REDUCE_SUM = "reduce_sum"
    REDUCE_PROD = "reduce_prod"
    REDUCE_MAX = "reduce_max"  # propagates NaN
    REDUCE_MIN = "reduce_min"
    REDUCE_ARGMAX = "reduce_argmax"  # (value, index) → index of the first max; NaN counts as max
    REDUCE_ARGMIN = "reduce_argmin"
    REDUCE_ANY = "reduce_any"
    REDUCE_ALL = "reduce_all"
    REDUCE_WELFORD = "reduce_welford"  # value → (mean, m2); m2 = sum of squared deviations


# The groups below are sets, not frozensets: `define_op` (`_op_semantics.py`) adds the ops it defines to them.
UNARY_MATH = frozenset({Op.NEG, Op.ABS, Op.RECIPROCAL, Op.SIGN, Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC})
TRANSCENDENTAL = frozenset({
    Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.TAN,
    Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH, Op.ERF, Op.ERFC,
    Op.ERFINV, Op.LGAMMA, Op.SIGMOID,
})
PREDICATES = {Op.ISNAN, Op.ISINF, Op.SIGNBIT}
BINARY_MATH = frozenset({
    Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.TRUNCDIV, Op.MOD, Op.FMOD, Op.POW, Op.MAXIMUM, Op.MINIMUM,
    Op.ATAN2, Op.COPYSIGN,
})
LOGICAL = frozenset({Op.AND, Op.OR, Op.XOR, Op.NOT})
BITWISE = frozenset({Op.BITAND, Op.BITOR, Op.BITXOR, Op.LSHIFT, Op.RSHIFT, Op.BITNOT})
COMPARISONS = {Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}
REDUCTIONS = frozenset({
    Op.REDUCE_SUM, Op.REDUCE_PROD, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_ARGMAX, Op.REDUCE_ARGMIN,
    Op.REDUCE_ANY, Op.REDUCE_ALL, Op.REDUCE_WELFORD,
})
FLOAT_ONLY = set(TRANSCENDENTAL | {Op.DIV, Op.ATAN2, Op.COPYSIGN, Op.REDUCE_WELFORD})
POINTWISE = set(UNARY_MATH | TRANSCENDENTAL | PREDICATES | BINARY_MATH | LOGICAL | BITWISE | COMPARISONS | {
    Op.WHERE, Op.CAST})

# Number of SSA operands (loads may add a mask, stores one value and maybe a mask).
ARITY: dict[Op, int] = {
    **{op: 1 for op in UNARY_MATH | TRANSCENDENTAL | PREDICATES | {Op.NOT, Op.BITNOT, Op.CAST}},
    **{op: 2 for op in BINARY_MATH | COMPARISONS | (LOGICAL - {Op.NOT}) | (BITWISE - {Op.BITNOT})},
    Op.WHERE: 3, Op.CONST: 0, Op.INDEX: 0,
    **{op: 1 for op in REDUCTIONS}, Op.REDUCE_ARGMAX: 2, Op.REDUCE_ARGMIN: 2,
}

# ---------------------------------------------------------------------------------------------- statements

Scalar = int | float | bool | None


@dataclass(frozen=True, slots=True)
class Instr:
    """One SSA instruction.

    outs: the names it defines (`()` for a store, two for `reduce_welford`); dtype: their dtype (for a store,
    the stored value's). srcs: SSA operands (a load's optional mask; a store's value then optional mask).
    buffer/index: what a load or store addresses; index holds the one expression of `Op.INDEX`.
    value: a const's value, or the value a masked load gives where its mask is false; for a cast, True when it is
    implicit (`IMPLICIT_CAST`). in_bounds: a gather's load whose index values a pass proved inside the buffer's
    shape (`bound-indices`): codegens do not test it (text: `load x[t3] in bounds`).
    """

    op: Op
    outs: tuple[str, ...]
    dtype: str
    srcs: tuple[str, ...] = ()
    buffer: str | None = None
    index: tuple[sympy.Expr, ...] = ()
    value: Scalar = None
    in_bounds: bool = False

    def replace(self, **changes: Any) -> Instr:
        return dataclasses.replace(self, **changes)

    @property
    def out(self) -> str:
        return self.outs[0]


# A cast's `value` when it only narrows an op's float32 result to its buffer's dtype, as eager stores it (printed
# `cast x implicit`; keep-float32 may drop it); a cast the program asked for (`Tensor.to`) has value None.
IMPLICIT_CAST = True


@dataclass(frozen=True, slots=True)
class Loop:
    """A loop over all of the kernel's r-dims. Its reductions finish when it ends."""

    body: tuple[Instr, ...]

    def replace(self, **changes: Any) -> Loop:
        return dataclasses.replace(self, **changes)


Stmt = Instr | Loop


@dataclass(frozen=True, slots=True)
class Dim:
    """One dim of a kernel's iteration space: `i<k>` (outer, parallel) or `r<k>` (reduced by Loop blocks)."""

    var: str
    size: sympy.Expr

    @property
    def reduce(self) -> bool:
        return self.var.startswith("r")


@dataclass(frozen=True, slots=True)
class Kernel:
    """A loop nest: `dims` and a body. `origins` names the graph nodes it computes, for people."""

    name: str
    dims: tuple[Dim, ...]
    body: tuple[Stmt, ...]
    origins: tuple[str, ...] = ()

    def replace(self, **changes: Any) -> Kernel:
        return dataclasses.replace(self, **changes)

    @property
    def outer_dims(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.dims if not d.reduce)

    @property
    def reduce_dims(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.dims if d.reduce)

    def instrs(self):
        """Every instruction, loops flattened, in order."""
        for s in self.body:
            if isinstance(s, Loop):
                yield from s.body
            else:
                yield s


@dataclass(frozen=True, slots=True)
class Item(Ref):
    """An extern argument that is the number a 0-d buffer holds, read when the call runs (`item(t)` in the text):
    a Python float Dynamo made an input (addmm's alpha, a norm's order), or one computed from it. A `Ref` to the
    buffer for everything that tracks what a step reads; the call gets `t.item()`, as ATen takes a Scalar."""


@dataclass(frozen=True, slots=True)
class Extern:
    """A call of an ATen op. Args hold `ember_core.Ref(buffer)`, `Item(buffer)`, `ember_core.Sym(expr)` and plain
    values. `outs` names one buffer per result (`"_"` for a result that is not a tensor, or is unused)."""

    outs: tuple[str, ...]
    op: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    origins: tuple[str, ...] = ()

    def replace(self, **changes: Any) -> Extern:
        return dataclasses.replace(self, **changes)


Step = Kernel | Extern

BUFFER_KINDS = ("input", "constant", "temp", "output", "view", "local", "part")


@dataclass(frozen=True, slots=True)
class Buffer:
    """A named tensor. kind: `input` and `constant` come from outside; `temp` and `output` are written by the
    plan; `view` reads another buffer's storage (`base`) with its own layout. A `temp` with a `base` reuses that
    buffer's storage, which is dead by then (see `_buffers.py`). A `local` is one kernel's per-iteration
    scratch row: static shape, row-major, stored and loaded by that kernel only. A `part` is a temp that lives
    in a slice of another buffer's storage (`base`, from `offset`), beside the other parts of that buffer: the
    base is never written whole, it is assembled, and is whole once each of its parts is (`cat-in-place`)."""

    name: str
    dtype: str
    shape: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    kind: str = "temp"
    offset: sympy.Expr = sympy.Integer(0)
    base: str | None = None

    def replace(self, **changes: Any) -> Buffer:
        return dataclasses.replace(self, **changes)

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """What lowering gives a codegen: buffers, steps in order, inputs and outputs of the graph it came from.

    inputs: the graph's input names in order (a tensor input is a buffer; a symbolic-int input is named as the
    symbol it binds). outputs: buffer names, or `ember_core.Sym` for a symbolic-int output. passes: the ids of
    the passes that made it, in order. symbols: the graph's symbols.
    """

    name: str
    buffers: tuple[Buffer, ...]
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[Any, ...]
    symbols: tuple[Symbol, ...] = ()
    passes: tuple[str, ...] = ()
    device: str = "cpu"

    def replace(self, **changes: Any) -> KernelPlan:
        return dataclasses.replace(self, **changes)

    # __str__ is the plan's text form, `format_plan`: `_printer.py` sets it (it imports this module, not the
    # other way round)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(s for s in self.steps if isinstance(s, Kernel))

    @property
    def externs(self) -> tuple[Extern, ...]:
        return tuple(s for s in self.steps if isinstance(s, Extern))

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"plan {self.name!r} has no buffer {name!r}")

    @property
    def buffer_map(self) -> dict[str, Buffer]:
        return {b.name: b for b in self.buffers}
