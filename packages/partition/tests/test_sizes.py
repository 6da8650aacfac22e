"""Byte sizes of values: numel x element size, symbolic sizes at their hints."""

from ember_core import Graph, Symbol, Value
from ember_partition import nbytes
from ember_partition._sizes import dim_at_hint, hints, numel


def test_tensor_bytes_are_numel_times_element_size():
    assert nbytes(Value(dtype="float32", shape=(8, 16)), {}) == 512
    assert nbytes(Value(dtype="bool", shape=(8, 16)), {}) == 128
    assert nbytes(Value(dtype="bfloat16", shape=(3,)), {}) == 6
    assert nbytes(Value(dtype="float64", shape=()), {}) == 8


def test_symbolic_sizes_are_evaluated_at_their_hints():
    graph = Graph(symbols=(Symbol("s0", 4), Symbol("s1", 10)))
    assert nbytes(Value(shape=("s0", "2*s1", 3)), hints(graph)) == 4 * 20 * 3 * 4


def test_floor_division_of_symbols_evaluates():
    assert dim_at_hint("FloorDiv(s0, 3)", {"s0": 10}) == 3


def test_sizes_and_scalars_take_eight_bytes_and_none_nothing():
    assert nbytes(Value(type="sym", dtype="int64"), {}) == 8
    assert nbytes(Value(type="scalar", dtype="float64"), {}) == 8
    assert nbytes(Value(type="none"), {}) == 0
    assert numel(Value(type="none"), {}) == 0
