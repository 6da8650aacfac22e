"""The pointwise ops of the loop IR over vectors of the prelude's vector layer (`ember_f32x16`): `VectorOps(lanes)`
prints one op on vector operands as `_cpp_rules` prints it on scalars, or gives None where there is no vector form
(the op then runs lane by lane: `VectorBody`, `_vector.py`). A bool is an int32 lane of -1 or 0; 64-bit values span
two registers a vector, so their compares run half a vector at a time (`ember_vcmp_wide`). A reduction's vector
update prints its combine op through `expression` too (`_reductions.py`).
"""

from __future__ import annotations

from ember_lowering import Op

from ._cpp_rules import FLOATS, INTS, literal
from ._libm import LIBM_OPS

# Vector element type per dtype (values; float16 and bfloat16 compute in float32) and per dtype in memory.
LANE = {"float32": "f32", "float16": "f32", "bfloat16": "f32", "float64": "f64", "int64": "i64", "int32": "i32",
        "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i32"}
_MEMORY = {**LANE, "float16": "u16", "bfloat16": "u16", "bool": "u8"}
_UNSIGNED = {"i64": "u64", "i32": "u32", "i16": "u16", "i8": "u8", "u8": "u8"}
_WIDE = {"f64", "i64", "u64"}  # 64-bit lanes: a mask of theirs narrows to int32 lanes
_NARROW = {"i16", "i8", "u8", "u16"}

_ARITH = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*"}
_CMP = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}
_CMP_CODE = {"==": 0, "!=": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}  # ember_vcmp_wide's OP
_SIGNED = {"float32": "int32", "float64": "int64", "float16": "int32", "bfloat16": "int32"}  # same-width ints
_BOOL = {Op.AND: "&", Op.OR: "|", Op.XOR: "^", Op.BITAND: "&", Op.BITOR: "|", Op.BITXOR: "^",
         Op.ADD: "|", Op.MUL: "&", Op.SUB: "^", Op.MAXIMUM: "|", Op.MINIMUM: "&", Op.NE: "^"}
_ROUNDING = {Op.FLOOR: "ember_vfloor", Op.CEIL: "ember_vceil", Op.ROUND: "ember_vrint", Op.TRUNC: "ember_vtrunc"}


class VectorOps:
    """Vector expressions of `lanes` lanes."""

    def __init__(self, lanes: int):
        self.lanes = lanes

    def vtype(self, dtype: str, memory: bool = False) -> str:
        return f"ember_{(_MEMORY if memory else LANE)[dtype]}x{self.lanes}"

    def _mask(self, expr: str, dtype: str) -> str:
        """A comparison of `dtype` lanes (narrower than 64 bits) as the int32 mask bools are held in."""
        if LANE[dtype] in _NARROW:
            return f"__builtin_convertvector({expr}, ember_i32x{self.lanes})"
        return expr

    def _compare(self, a: str, op: str, b: str, dtype: str) -> str:
        """`a op b` over `dtype` lanes as an int32 mask; 64-bit lanes half a vector at a time (`ember_vcmp_wide`)."""
        if LANE[dtype] in _WIDE:
            return f"ember_vcmp_wide<{_CMP_CODE[op]}, ember_i32x{self.lanes}>({a}, {b})"
        return self._mask(f"({a} {op} {b})", dtype)

    def expression(self, op: Op, a: list[str], src: list[str], dtype: str) -> str | None:
        kind = src[0] if src else dtype
        if op is Op.WHERE:
            return f"ember_vsel({a[0]}, {a[1]}, {a[2]})"
        if op is Op.CAST:
            return self._cast(a[0], src[0], dtype)
        if op in _CMP:
            if kind == "bool":
                return f"({a[0]} {_CMP[op]} {a[1]})" if op in (Op.EQ, Op.NE) else None
            return self._compare(a[0], _CMP[op], a[1], kind)
        if kind == "bool":
            if op is Op.NOT or op is Op.BITNOT:
                return f"(~{a[0]})"
            return f"({a[0]} {_BOOL[op]} {a[1]})" if op in _BOOL and len(a) == 2 else None
        if kind in FLOATS:
            return self._float(op, a, kind)
        if kind in INTS:
            return self._int(op, a, kind)
        return None

    def _float(self, op: Op, a: list[str], kind: str) -> str | None:
        f32 = kind != "float64"
        one = "1.0f" if f32 else "1.0"
        if op in _ARITH:
            return f"({a[0]} {_ARITH[op]} {a[1]})"
        simple = {
            Op.NEG: f"(-{a[0]})", Op.ABS: f"ember_vabs({a[0]})", Op.DIV: f"({a[0]} / {a[1]})" if len(a) > 1 else None,
            Op.RECIPROCAL: f"({one} / {a[0]})", Op.SQRT: f"ember_vsqrt({a[0]})",
            Op.RSQRT: f"({one} / ember_vsqrt({a[0]}))", Op.MAXIMUM: f"ember_vmax({a[0]}, {a[-1]})",
            Op.MINIMUM: f"ember_vmin({a[0]}, {a[-1]})", Op.COPYSIGN: f"ember_vcopysign({a[0]}, {a[-1]})",
            Op.ISNAN: self._compare(a[0], "!=", a[0], kind),
            Op.ISINF: self._compare(f"ember_vabs({a[0]})", "==", self._splat(float("inf"), kind), kind),
            Op.SIGNBIT: self._compare(f"(({self.vtype(_SIGNED[kind])}){a[0]})", "<", self._splat(0, _SIGNED[kind]),
                                      _SIGNED[kind]),
        }
        if op in simple:
            return simple[op]
        if op in _ROUNDING:
            return f"{_ROUNDING[op]}({a[0]})"
        if op is Op.EXP:
            return f"ember_vexpf({a[0]})" if f32 else f"ember_vexp({a[0]})"
        if op is Op.SIGMOID:
            return f"ember_vsigmoidf({a[0]})" if f32 else f"(1.0 / (1.0 + ember_vexp(-{a[0]})))"
        if op is Op.POW:
            return f"ember_vpow({a[0]}, {a[1]})"
        if op in LIBM_OPS:
            return f"ember_v{op.value}({', '.join(a)})"
        return None

    def _int(self, op: Op, a: list[str], kind: str) -> str | None:
        t = self.vtype(kind)
        u = f"ember_{_UNSIGNED[LANE[kind]]}x{self.lanes}"
        if op in _ARITH:  # wraps, as torch's integer arithmetic does: in unsigned lanes
            return f"(({t})(({u}){a[0]} {_ARITH[op]} ({u}){a[1]}))"
        if op is Op.NEG:
            return f"(({t})(-({u}){a[0]}))"
        if op in (Op.BITAND, Op.BITOR, Op.BITXOR):
            return f"({a[0]} {_BOOL[op]} {a[1]})"
        if op is Op.BITNOT:
            return f"(~{a[0]})"
        if op is Op.MAXIMUM:
            return f"ember_vmax({a[0]}, {a[1]})"
        if op is Op.MINIMUM:
            return f"ember_vmin({a[0]}, {a[1]})"
        return None

    def _splat(self, value: float, dtype: str) -> str:
        return f"ember_vsplat<{self.vtype(dtype)}>({literal(value, dtype)})"

    def _cast(self, a: str, src: str, dst: str) -> str | None:
        """`cast` of `_cpp_rules` over lanes."""
        if src == dst or (src in ("float16", "bfloat16") and dst == "float32"):
            return a
        if dst == "bool":
            return a if src == "bool" else self._compare(a, "!=", self._splat(0, src), src)
        value = f"({a} & 1)" if src == "bool" else a
        if dst in ("float16", "bfloat16"):
            f32 = value if src in ("float32", "float16", "bfloat16") else \
                f"__builtin_convertvector({value}, ember_f32x{self.lanes})"
            return f"ember_vround_{'f16' if dst == 'float16' else 'bf16'}({f32})"
        if dst in ("int8", "uint8", "int16") and src in FLOATS:
            value = f"__builtin_convertvector({value}, ember_i32x{self.lanes})"
        return f"__builtin_convertvector({value}, {self.vtype(dst)})"
