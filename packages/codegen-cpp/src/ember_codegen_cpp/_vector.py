"""A pointwise kernel's inner loop over explicit vectors, so no kernel depends on gcc's auto-vectorizer.

The last i-dim runs in steps of `lanes` elements (16 float32 on AVX-512, 8 on AVX2) and every SSA value `t5` is a
vector `t5_v` of the prelude's vector layer (`ember_f32x16`; a bool is an int32 lane of -1 or 0); the elements that
fill no whole vector run through the scalar loop as before. An instruction is printed one of three ways:

- as a vector expression (`(t3_v * t4_v)`, `ember_vexpf(t3_v)`, a libmvec call, a select: `_vector_ops.py`);
- a load or store: one unaligned vector move where the address steps by one element with the loop var, a scalar
  load put in every lane where it does not move; a masked load (a `cat`, a `slice_scatter`, padding) one vector
  move or the fill value where the mask holds in all lanes or in none, lane by lane only where it changes;
- lane by lane where there is no vector form (integer division, gathers through an index read from memory,
  the step of a masked load where its mask changes): the scalar printer's own lines in a loop over the lanes,
  between reading the operands' lanes and writing the results' (consecutive such instructions share one loop). The
  kernel is still explicit vector code; `VectorBody.lane_ops` names these for the vectorization report. A value
  the same in every lane (a row's index in a gather, an embedding's row) is also a scalar of the step, which lane
  loops read as it is; the lanes of a gather whose address still differs from lane to lane are an unrolled loop of
  scalar loads, not `omp simd` (which gcc makes one vector gather instruction, slower: see `_lanewise`).

64-bit values span two registers a vector; their compares and selects run half a vector at a time
(`ember_vcmp_wide`, `ember_vsel`), which gcc would otherwise turn into one scalar compare per lane.

Values computed the same way in vector lanes and in the scalar tail agree bit for bit (`ember_vexpf` is the scalar
`ember_expf` over lanes); libm functions use libmvec's variant in lanes and glibc's scalar function in the tail, both
within a few ulp.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import sympy
from ember_core import as_sympy
from ember_lowering import REDUCTIONS, Instr, Op, flat_index
from ember_lowering.codegen import CannotPrint

from ._cpp_rules import CTYPE, FLOATS, literal
from ._vector_ops import LANE, VectorOps

if TYPE_CHECKING:
    from ._kernel_printer import KernelPrinter

_INTEGERS = frozenset({"int64", "int32", "int16", "int8", "uint8", "bool"})
_ACCUMULATES = {"float32", "float64", "int64", "int32"}  # accumulator dtypes updated as vectors (others by lanes)
# Bytes of one element of each C type a stack array is declared with (`check_stack_vector`).
_C_BYTES = {"double": 8, "float": 4, "int64_t": 8, "uint64_t": 8, "int32_t": 4, "uint32_t": 4, "int16_t": 2,
            "uint16_t": 2, "int8_t": 1, "uint8_t": 1, "bool": 1}


def check_stack_vector(array: str, ctype: str | None, vector: str) -> None:
    """A vector of type `vector` (`ember_f32x16`, or half of one: `ember_f64h8`) is loaded from or stored to the
    stack array `array` (a block array, a row's stash, an accumulator's lanes), whose elements the kernel declares
    as `ctype` (None: not declared by this kernel). A vector moves whole, so each lane must be exactly one element;
    otherwise it reads or writes its neighbours' bytes and past the array's end, and the kernel would be wrong with
    no error (int32 masks copied into bool block arrays did that: 82fe9ed). `CannotPrint` instead: the kernel runs
    in the interpreter, visibly, rather than built wrong. A bool array is moved as bytes (`ember_u8x`), narrowed
    and widened by the bool conversions of `VectorBody`."""
    m = re.fullmatch(r"ember_[fiu](8|16|32|64)[xh]\d+", vector)
    lane = int(m[1]) // 8 if m else None
    element = _C_BYTES.get(ctype or "")
    if lane is None or element is None or lane != element:
        raise CannotPrint(f"a vector {vector} moved to or from stack array {array} of {ctype or 'undeclared'} "
                          f"elements: {lane or '?'} bytes a lane, {element or '?'} an element")


class VectorBody(VectorOps):
    """Prints the body of one vector step of a pointwise kernel whose scalar body `printer` has printed already
    (so it knows every value's dtype and the roots)."""

    def __init__(self, printer: KernelPrinter, lanes: int, last: str, reduce_lane: str | None = None,
                 block: bool = False):
        super().__init__(lanes)
        self.p, self.last = printer, last
        self.reduce_lane = reduce_lane  # a reduction's lane loop: the accumulator lane of vector lane ember_l
        # Lanes are i-points of an outer-contiguous reduction's block: a value of the block's statements lives in
        # a block array (`ember_b_t3[ember_j]`), read and written a vector at a time; ember_j is the step's first
        # i-point (and in a lane loop, the lane's).
        self.block = block
        self.lane_ops: list[str] = []  # ops printed lane by lane, for the report
        self.defined: set[str] = set()  # values held in vectors; any other (a row's value) is a scalar
        # values the same in every lane of a pointwise step, whose scalar is in scope too (`_uniform`)
        self.scalars: set[str] = set()
        self.uniform = reduce_lane is None and not block

    def ref(self, name: str) -> str:
        """Value `name` as a vector: its own, or a scalar of the row put in every lane."""
        if name in self.defined:
            return f"{name}_v"
        t = self.vtype(self.p.dtypes[name])
        if self._in_block_array(name):
            return self._block_load(name)
        return f"ember_vsplat<{t}>({self.p.ref(name)}{' ? -1 : 0' if self.p.dtypes[name] == 'bool' else ''})"

    def lines(self, instrs: list[Instr]) -> list[str]:
        out: list[str] = []
        group: list[Instr] = []
        for i in instrs:
            vec = self._uniform(i)
            if vec is not None:
                self.scalars.update(i.outs)
            else:
                vec = self._vector(i)
            if vec is None:
                group.append(i)
                self.defined.update(o for o in i.outs if i.op is not Op.STORE and i.op not in REDUCTIONS)
                continue
            if group:
                out += self._lanewise(group)
                group = []
            out += vec
            outs = [o for o in i.outs if i.op is not Op.STORE and i.op not in REDUCTIONS]
            out += [self._block_store(o) for o in outs if self._in_block_array(o)]
            self.defined.update(outs)
        if group:
            out += self._lanewise(group)
        return out

    def _in_block_array(self, name: str) -> bool:
        return self.block and self.p.names.get(name, "").startswith("ember_b_")

    # A block array holds one element of the value's C type per i-point (`KernelPrinter._outer_reduction`), a row's
    # stash one per r-point (`KernelPrinter._reduction`): float16 and bfloat16 as float, so their vectors are the
    # value's float lanes, not the u16 lanes of memory; a bool is one byte there but an int32 lane in a vector, so
    # its vectors narrow on the way in and widen on the way out as a bool tensor's do (an int32 vector copied whole
    # wrote 4 bytes an element, past the array's end). Every such move is checked against the array's declaration.

    def _block_load(self, name: str) -> str:
        array = f"ember_b_{name}"
        return self._stack_load(array, f"{array} + ember_j", self.p.dtypes[name])

    def _block_store(self, name: str) -> str:
        array = f"ember_b_{name}"
        return self._stack_store(array, f"{array} + ember_j", self.p.dtypes[name], f"{name}_v")

    def _stack_load(self, array: str, address: str, dtype: str) -> str:
        """The vector of `dtype` lanes read from consecutive elements of stack array `array` at `address`."""
        if dtype == "bool":
            raw = self._stack_move(array, f"ember_u8x{self.lanes}", "load", address)
            return self._mask(f"({raw} != 0)", "uint8")
        return self._stack_move(array, self.vtype(dtype), "load", address)

    def _stack_store(self, array: str, address: str, dtype: str, value: str) -> str:
        if dtype == "bool":
            narrow = f"ember_u8x{self.lanes}"
            return self._stack_move(array, narrow, "store", address, f"__builtin_convertvector({value} & 1, {narrow})")
        return self._stack_move(array, self.vtype(dtype), "store", address, value)

    def _stack_move(self, array: str, vector: str, how: str, address: str, value: str = "") -> str:
        """One vector load or store of stack array `array`, once its element fits the vector's lane."""
        check_stack_vector(array, self.p.stack.get(array), vector)
        if how == "load":
            return f"ember_vload<{vector}>({address})"
        return f"ember_vstore({address}, {value});"

    def _uniform(self, i: Instr) -> list[str] | None:
        """A value of a pointwise step that is the same in every lane (a constant, a load or an index value that
        does not move with the last i-dim, integer arithmetic of such values): its scalar line, then its vector.
        Lane loops read the scalar: a gather at `x[i0, t2, t3]` with t2 of the row then computes its row's
        address once and only t3's part lane by lane. (Integers only, beyond constants and loads: a float op's
        scalar form may differ from its lanes' in the last bits.)"""
        if not self.uniform or len(i.outs) != 1 or i.op is Op.STORE or i.op in REDUCTIONS:
            return None
        if i.op is Op.LOAD:
            if i.srcs or self._step(i) != 0:
                return None
        elif i.op is Op.INDEX:
            if {s.name for s in as_sympy(i.index[0]).free_symbols} & ({self.last} | set(self.p.dtypes)):
                return None
        elif i.op is not Op.CONST and (i.dtype not in _INTEGERS or not all(s in self.scalars for s in i.srcs)):
            return None
        t = self.vtype(i.dtype)
        scalar = f"{self.p.ref(i.out)}{' ? -1 : 0' if i.dtype == 'bool' else ''}"
        return [*self.p._instr(i, None), f"const {t} {i.out}_v = ember_vsplat<{t}>({scalar});"]

    # ------------------------------------------------------------------ lane by lane

    def _lanewise(self, group: list[Instr]) -> list[str]:
        """The scalar printer's lines for `group`, once per lane: operands read from their vectors' lanes, results
        written to theirs."""
        self.lane_ops += [i.op.value for i in group]
        results = [o for i in group if i.op is not Op.STORE and i.op not in REDUCTIONS for o in i.outs]
        used: dict[str, None] = {}  # each operand read from its vector once, however often the group names it
        for i in group:
            names = list(i.srcs) + [s.name for e in i.index for s in as_sympy(e).free_symbols]
            used.update((n, None) for n in names if n in self.defined and n not in results and n not in self.scalars)
        decls = [f"{self.vtype(self.p.dtypes[o])} {o}_v;" for o in results]
        reads = []
        for n in used:
            t = self.p.dtypes[n]
            reads.append(f"const bool {n} = {n}_v[ember_l] != 0;" if t == "bool" else
                         f"const {CTYPE[t]} {n} = {n}_v[ember_l];")
        body = [line for i in group
                for line in self.p._instr(i, self.reduce_lane if i.op in REDUCTIONS else None)]
        writes = [f"{o}_v[ember_l] = {o} ? -1 : 0;" if self.p.dtypes[o] == "bool" else f"{o}_v[ember_l] = {o};"
                  for o in results]
        # gcc makes the lanes of a gather one vector gather instruction, 1.7x slower on Zen 5 than the scalar loads
        # an unrolled loop makes (bilinear resize: 2.6 ms vs 1.5 ms; 0.9 ms with the row's address computed once)
        gathers = any(i.op is Op.LOAD and self._gathers(i) for i in group) and not any(
            i.op in REDUCTIONS for i in group)
        pragma = f"#pragma GCC unroll {self.lanes}" if gathers else "#pragma omp simd"
        return [*decls, pragma, f"for (int64_t ember_l = 0; ember_l < {self.lanes}; ++ember_l) {{",
                *(["  const int64_t ember_j = ember_jv + ember_l;"] if self.block else []),
                f"  const int64_t {self.last} = ember_v + ember_l;",
                *["  " + x for x in reads + body + writes], "}"]

    def _gathers(self, i: Instr) -> bool:
        """Does the access's index read values that differ from lane to lane (a gather's, tested or proven in
        bounds)? An embedding's row, the same in every lane, leaves consecutive elements: `omp simd` loads them as
        one vector."""
        return any(s.name in self.p.dtypes and s.name not in self.scalars
                   for e in i.index for s in as_sympy(e).free_symbols)

    # ------------------------------------------------------------------ vector forms

    def _vector(self, i: Instr) -> list[str] | None:
        if i.op is Op.LOAD:
            return self._load(i)
        if i.op is Op.STORE:
            return self._store(i)
        if i.op is Op.CONST:
            value = ("-1" if i.value else "0") if i.dtype == "bool" else literal(i.value, i.dtype)
            return [f"const {self.vtype(i.dtype)} {i.out}_v = ember_vsplat<{self.vtype(i.dtype)}>({value});"]
        if i.op is Op.INDEX:
            return self._iota(i)
        if i.op in REDUCTIONS:
            acc = self.p.accs[i.out]
            src = self.p.dtypes[i.srcs[0]]
            if LANE[src] != LANE[i.dtype] or i.dtype not in _ACCUMULATES:
                return None
            value, state = self.ref(i.srcs[0]), self.vtype(acc.state)
            if acc.state != i.dtype:  # lanes held wider than the values (float32 Welford in double)
                value = f"__builtin_convertvector({value}, {state})"
            return acc.vector_update(value, "ember_j", state)
        if len(i.outs) != 1:
            return None
        src = [self.p.dtypes[s] for s in i.srcs]
        expr = self.expression(i.op, [self.ref(s) for s in i.srcs], src, i.dtype)
        if expr is None:
            return None
        return [f"const {self.vtype(i.dtype)} {i.out}_v = {expr};"]

    def _iota(self, i: Instr) -> list[str] | None:
        """An index value affine in the last i-dim: its value at the step's first element plus the lane number
        times the coefficient, in int64 lanes, converted as the scalar line converts."""
        e = sympy.expand(as_sympy(i.index[0]))
        if {s.name for s in e.free_symbols} & set(self.p.dtypes) or i.dtype == "bool":
            return None
        v = next((s for s in e.free_symbols if s.name == self.last), None)
        coeff = e.coeff(v, 1) if v is not None else sympy.Integer(0)
        if not coeff.is_Integer or (v is not None and v in sympy.expand(e - coeff * v).free_symbols):
            return None
        t = f"ember_i64x{self.lanes}"
        value = f"(ember_vsplat<{t}>((int64_t)({self.p.expr(e)})) + {int(coeff)}LL * ember_viota<{t}>())"
        return [f"const {self.vtype(i.dtype)} {i.out}_v = {self._cast(value, 'int64', i.dtype)};"]

    # ------------------------------------------------------------------ memory

    def _step(self, i: Instr) -> int | None:
        """How far (in elements) the address moves per step of the last i-dim: 0 or 1 for what this prints as one
        vector access, None for anything else (another stride, an index read from memory, a floor or mod)."""
        b = self.p.layout.buffers[i.buffer]
        flat = sympy.expand(flat_index(i.index, b.stride, 0, self.p.ranges) if i.buffer in self.p.locals
                            else self.p.flat(i))
        names = {s.name for s in flat.free_symbols}
        if names & set(self.p.dtypes):
            return None
        v = next((s for s in flat.free_symbols if s.name == self.last), None)
        if v is None:
            return 0
        coeff = flat.coeff(v, 1)
        rest = sympy.expand(flat - coeff * v)
        if v in rest.free_symbols or coeff != 1:
            return None
        return 1

    def _load(self, i: Instr) -> list[str] | None:
        step = self._step(i)
        if step is None:
            return None
        t = self.vtype(i.dtype)
        if i.srcs:  # masked: one vector read where the mask holds in every lane, lane by lane where it varies
            raw = self._contiguous_load(i) if step == 1 else None
            if raw is None:
                return None
            mask, other = self.ref(i.srcs[0]), literal(i.value if i.value is not None else 0, i.dtype)
            kept = len(self.lane_ops)
            decl, *lanes = self._lanewise([i])
            del self.lane_ops[kept:]  # only the vectors that straddle the mask's edge take this way
            return [decl, f"if (ember_vall({mask})) {i.out}_v = {raw};",
                    f"else if (ember_vnone({mask})) {i.out}_v = ember_vsplat<{t}>({other});",
                    "else {", *("  " + x for x in lanes), "}"]
        if step == 0:
            return [*self.p._instr(i, None), f"const {t} {i.out}_v = ember_vsplat<{t}>({i.out});"]
        raw = self._contiguous_load(i)
        return None if raw is None else [f"const {t} {i.out}_v = {raw};"]

    def _contiguous_load(self, i: Instr) -> str | None:
        """The vector of `i`'s lanes read from consecutive elements, converted to its dtype's lanes."""
        dtype = self.p.layout.buffers[i.buffer].dtype
        if dtype != i.dtype and not (dtype in ("float16", "bfloat16") and i.dtype in FLOATS - {"float64"}):
            return None
        if i.buffer in self.p.locals:  # a row's stash: elements of the value's C type (float for float16)
            return self._stack_load(self.p.layout.local[i.buffer], self._address(i), dtype)
        raw = f"ember_vload<{self.vtype(dtype, memory=True)}>({self._address(i)})"
        if dtype == "bfloat16":
            raw = f"ember_vload_bf16({raw})"
        elif dtype == "float16":
            raw = f"ember_vload_f16({raw})"
        elif dtype == "bool":
            raw = self._mask(f"({raw} != 0)", "uint8")
        return raw

    def _store(self, i: Instr) -> list[str] | None:
        if len(i.srcs) > 1 or self._step(i) != 1:
            return None
        dtype, src = self.p.layout.buffers[i.buffer].dtype, self.p.dtypes[i.srcs[0]]
        value = self.ref(i.srcs[0])
        if (dtype == "bool") != (src == "bool") or LANE[dtype] != LANE[src]:
            return None  # a store that converts
        if i.buffer in self.p.locals:  # a row's stash holds the value's C type: a store that converts goes by lanes
            return None if src != dtype else [self._stack_store(self.p.layout.local[i.buffer], self._address(i),
                                                                dtype, value)]
        if dtype in ("bfloat16", "float16"):
            source = self.p.rounded_from.get(i.srcs[0])
            if src == dtype and source is not None and self.p.dtypes.get(source) == "float32":
                value = self.ref(source)  # the store rounds it as the cast did; the cast, unread, is compiled away
            value = f"ember_vstore_{'bf16' if dtype == 'bfloat16' else 'f16'}({value})"
        elif dtype == "bool":
            value = f"__builtin_convertvector({value} & 1, ember_u8x{self.lanes})"
        return [f"ember_vstore({self._address(i)}, {value});"]

    def _address(self, i: Instr) -> str:
        """The address of a vector access's first element (a local: the row's stack array)."""
        if i.buffer in self.p.locals:
            return "&" + self.p._local(i)
        ptr, flat = self.p._address(i)
        return f"{ptr} + {flat}"
