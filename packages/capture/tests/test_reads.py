"""What a traced function reads besides its arguments: found by walking code, guarded, read live, substituted."""

from __future__ import annotations

import types

import pytest
import torch
from ember_capture import CaptureError
from ember_capture._guards import GuardBuilder
from ember_capture._reads import find_reads
from ember_capture._stand_ins import StandIns

RATE = 0.5
TABLE = {"w": torch.ones(2), "k": 3}
NESTED = [(1, torch.zeros(3)), {"deep": [2.0]}]
LINEAR = torch.nn.Linear(2, 2)
SETTINGS = types.SimpleNamespace(eps=1e-5, unused=[1, 2, 3])


def _helper(x):
    return x * RATE


def _uses_helper_and_table(x):
    return _helper(x) + TABLE["w"] * TABLE["k"]


def _labels(reads, kind=None):
    return [r.label for r in reads.found if kind is None or r.kind == kind]


def _guard(reads):
    g = GuardBuilder()
    reads.add_checks(g)
    return g.build()


def test_globals_of_the_function_and_of_the_helpers_it_names():
    reads = find_reads(_uses_helper_and_table)
    assert set(_labels(reads, "value")) >= {"RATE", "TABLE['k']"}
    assert _labels(reads, "tensor") == ["TABLE['w']"]
    assert "torch" not in _labels(reads)  # a library module: not walked, and not guarded


def test_closure_cells_and_nested_code():
    scale, bias = 2.0, torch.ones(3)

    def f(x):
        return [v * scale for v in x] + [(lambda y: y + bias)(x)]

    reads = find_reads(f)
    assert _labels(reads, "value") == ["scale"] and _labels(reads, "tensor") == ["bias"]


def test_containers_and_attributes_named_by_the_code():
    def f(x):
        return x * NESTED[1]["deep"][0] + SETTINGS.eps

    reads = find_reads(f)
    assert set(_labels(reads, "value")) == {"NESTED[0][0]", "NESTED[1]['deep'][0]", "SETTINGS.eps"}
    assert _labels(reads, "tensor") == ["NESTED[0][1]"]
    assert "SETTINGS.unused" not in _labels(reads)  # not an attribute the code loads


def test_modules_are_owners_and_their_forward_code_is_walked():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(2, 2)
            self.factor = 3.0

        def forward(self, x):
            return self.inner(x) * self.factor * RATE

    model = Scaled()
    reads = find_reads(model)
    assert [o.module for o in reads.owners] == [model]
    assert set(_labels(reads, "value")) == {"RATE", "self.factor"}


def test_a_module_in_a_global_list_is_an_owner_found_by_its_path():
    layers = [torch.nn.Linear(2, 2), LINEAR]

    def f(x):
        return layers[1](layers[0](x)) + LINEAR(x)

    reads = find_reads(f)
    assert [o.prefix for o in reads.owners] == ["layers[0]", "layers[1]"]  # LINEAR is layers[1]: lifted once


def test_guard_fails_on_a_changed_value_and_explains_it(monkeypatch):
    check, explain, source = _guard(find_reads(_uses_helper_and_table))
    assert check([], None) and explain([], None) is None
    monkeypatch.setitem(globals(), "RATE", 0.25)
    assert not check([], None) and explain([], None) == "RATE: changed from 0.5 to 0.25"
    monkeypatch.setitem(globals(), "RATE", 0.5)
    monkeypatch.setitem(TABLE, "extra", 1)
    assert explain([], None) == "TABLE: keys changed from ['w', 'k'] to ['w', 'k', 'extra']"
    assert "RATE" not in source and "'w'" not in source  # names and keys reach the guard as constants only


def test_tensors_are_guarded_by_metadata_not_identity(monkeypatch):
    check, explain, _ = _guard(find_reads(_uses_helper_and_table))
    monkeypatch.setitem(TABLE, "w", torch.full((2,), 7.0))
    assert check([], None)
    monkeypatch.setitem(TABLE, "w", torch.ones(5))
    assert explain([], None) == "TABLE['w']: size of dim 0 changed from 2 to 5"


def test_tensors_are_fetched_live_and_substituted_while_tracing(monkeypatch):
    w = torch.ones(3)
    holder = (w, 1)

    def f(x):
        return x + holder[0] + TABLE["w"].sum()

    reads = find_reads(f)
    tensors = reads.tensors
    assert [r.label for r in tensors] == ["holder[0]", "TABLE['w']"]
    fetch = [r.fetch for r in tensors]
    new = torch.zeros(2)
    monkeypatch.setitem(TABLE, "w", new)
    assert fetch[1]() is new
    stand_ins = [torch.full((3,), 5.0), torch.full((2,), 7.0)]
    with StandIns(reads.pairs(stand_ins)):
        assert holder[0] is w and TABLE["w"] is new  # nothing is written where they were found
        assert torch.equal(holder[0] * 1, stand_ins[0])  # but this thread's torch calls see the stand-ins
        assert torch.equal(f(torch.zeros(3)), torch.full((3,), 5.0))  # `new`, found after the walk, has none
    assert holder[0] is w and TABLE["w"] is new


def test_a_tensor_put_where_one_was_found_is_put_back_and_refused():
    w = torch.ones(3)
    holder = [w]
    reads = find_reads(lambda x: x + holder[0])
    with pytest.raises(CaptureError, match=r"puts another tensor in holder\[0\]"):
        with reads.kept():
            holder[0] = w * 2
    assert holder[0] is w


class _Table:
    WEIGHTS = torch.ones(2)


def test_a_class_attribute_tensor_is_substituted_and_put_back():
    reads = find_reads(lambda x: x * _Table.WEIGHTS)
    assert [r.label for r in reads.tensors] == ["_Table.WEIGHTS"]
    original, stand_in = _Table.WEIGHTS, torch.zeros(2)
    with StandIns(reads.pairs([stand_in])):
        assert _Table.WEIGHTS is original and torch.equal(_Table.WEIGHTS * 3, stand_in)
    assert _Table.WEIGHTS is original


def test_hostile_keys_and_names_never_become_code():
    weird = {"'); import os; os.system('x') #": 1.0, 3: 2.0}

    def f(x):
        return x * weird[3]

    check, explain, source = _guard(find_reads(f))
    assert check([], None) and "import os" not in source
    weird[3] = 4.0
    assert explain([], None) == "weird[3]: changed from 2.0 to 4.0"


def test_too_many_values_raise_a_capture_error():
    big = list(range(100_000))

    def f(x):
        return x + big[0]

    with pytest.raises(CaptureError, match="reads more than"):
        find_reads(f)
