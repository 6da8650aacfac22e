"""Index expressions: integer symbols, range-aware simplification, flat indices."""

import sympy
from ember_lowering import Ranges, flat_index, simplify, storage_size
from ember_lowering._indexing import contiguous_strides, is_nonneg, parse_expr, sym

i0, i1, s0, s1 = sym("i0"), sym("i1"), sym("s0"), sym("s1")


def test_parsed_and_built_symbols_are_equal():
    assert parse_expr("16*i0 + i1") == 16 * i0 + i1
    assert parse_expr("floor(i0/4) + Mod(i1, s0)") == sympy.floor(i0 / 4) + sympy.Mod(i1, s0)


def test_floor_and_mod_vanish_when_the_ranges_prove_them_trivial():
    r = Ranges({"i0": sympy.Integer(8), "i1": sympy.Integer(16)})
    assert simplify(sympy.floor((16 * i0 + i1) / 16), r) == i0
    assert simplify(sympy.Mod(16 * i0 + i1, 16), r) == i1
    assert simplify(sympy.floor(i1 / 32), r) == 0


def test_symbolic_sizes_simplify_too():
    r = Ranges({"i0": s0, "i1": s1}, {"s0": 2, "s1": 2})
    assert simplify(sympy.floor((s1 * i0 + i1) / s1), r) == i0
    assert simplify(sympy.Mod(s1 * i0 + i1, s1), r) == i1


def test_nothing_is_dropped_without_proof():
    r = Ranges({"i1": sympy.Integer(20)})
    assert simplify(sympy.floor(i1 / 16), r) == sympy.floor(i1 / 16)
    assert simplify(sympy.Mod(i1, 16), r) == sympy.Mod(i1, 16)


def test_flatten_of_an_unflatten_is_the_identity():
    v = sym("v")
    idx = [sympy.floor(v / 30), sympy.Mod(sympy.floor(v / 5), 6), sympy.Mod(v, 5)]
    assert flat_index(idx, contiguous_strides([4, 6, 5]), ranges=Ranges({"v": sympy.Integer(120)})) == v


def test_flat_index_applies_strides_and_offset():
    assert flat_index([i0, i1], [1, s0], s0 + 2) == i0 + s0 * i1 + s0 + 2


def test_storage_size_and_strides():
    assert contiguous_strides([sympy.Integer(3), s0, sympy.Integer(0)]) == (s0, 1, 1)
    assert storage_size([sympy.Integer(4), sympy.Integer(5)], [sympy.Integer(1), sympy.Integer(8)]) == 36
    assert storage_size([sympy.Integer(0)], [sympy.Integer(1)]) == 0


def test_nonnegativity_uses_symbol_lower_bounds():
    r = Ranges({}, {"s0": 2})
    assert is_nonneg(s0 - 2, r) and not is_nonneg(s0 - 3, r) and is_nonneg(s0 * s0 - 4, r)


def test_a_flatten_of_an_unflatten_over_a_symbolic_row_is_the_identity():
    """floor(i/s1)*s1*s3 + Mod(i, s1)*s3 + j is i*s3 + j: the coefficient s3 (a dynamic row length) is a symbol."""
    from ember_lowering import Ranges, flat_index, sym

    i, j, s1, s3 = (sym(n) for n in ("i0", "i1", "s1", "s3"))
    index = (sympy.floor(i / s1), sympy.Mod(i, s1), j)
    ranges = Ranges({"i0": 6 * s1, "i1": s3}, {"s1": 2, "s3": 2})
    assert sympy.expand(flat_index(index, (s1 * s3, s3, 1), 0, ranges) - (i * s3 + j)) == 0


def test_only_a_symbol_whose_range_starts_at_zero_or_above_is_taken_for_nonnegative():
    """A graph symbol may be an int the program passed, below 0 (a negative index): it is nonnegative only when its
    declared lower bound says so; one without a declared range is not assumed to be."""
    from ember_core import INT64_MIN

    k = sym("k")
    assert is_nonneg(k, Ranges(lowers={"k": 0})) and is_nonneg(k - 2, Ranges(lowers={"k": 2}))
    assert not is_nonneg(k, Ranges(lowers={"k": INT64_MIN}))
    assert not is_nonneg(k, Ranges()) and not is_nonneg(k * s0, Ranges(lowers={"s0": 2}))
    r = Ranges({"i0": sympy.Integer(8)}, {"k": INT64_MIN})
    assert simplify(sympy.Mod(i0 + k, 8), r) == sympy.Mod(i0 + k, 8)  # i0 + k may leave [0, 8)


def test_a_kept_address_is_one_of_the_same_ranges():
    """flat_index keeps its simplified addresses (kernels of one shape address alike): a name's range is part of
    what is kept, so the same address under other ranges is simplified again, not taken from the first."""
    x, s = sym("x"), sym("s")
    address = [sympy.floor(x / 4), sympy.Mod(x, 4)]
    assert flat_index(address, [1, 1], ranges=Ranges({"x": sympy.Integer(4)})) == x
    assert flat_index(address, [1, 1], ranges=Ranges({"x": sympy.Integer(8)})) == sympy.floor(x / 4) + \
        sympy.Mod(x, 4)
    assert flat_index(address, [1, 1]) == sympy.floor(x / 4) + sympy.Mod(x, 4)
    assert flat_index(address, [1, 1], ranges=Ranges({"x": sympy.Integer(4)})) == x
    # a symbol's lower bound: x in [0, s) with s >= 1 is its own remainder; without the bound s may be negative
    rest = [sympy.Mod(x, s)]
    assert flat_index(rest, [1], ranges=Ranges({"x": s}, {"s": 1})) == x
    assert flat_index(rest, [1], ranges=Ranges({"x": s})) == sympy.Mod(x, s)
    assert flat_index(rest, [1], ranges=Ranges({"x": s}, {"s": 1})) == x
