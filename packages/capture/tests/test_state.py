"""Module state: which modules a function reads, their tensors lifted as inputs, and guards on them."""

from __future__ import annotations

import pytest
import torch
from ember_capture import CaptureError
from ember_capture._guards import GuardBuilder
from ember_capture._reads import find_reads
from ember_capture._stand_ins import StandIns
from ember_capture._state import ModuleState, find_owners

_MODEL = torch.nn.Linear(2, 2)


def _reads_global(x):
    return _MODEL(x)


def test_owners_are_the_module_its_self_or_its_closure_and_globals():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert [o.module for o in find_owners(model)] == [model]
    assert [o.module for o in find_owners(model.forward)] == [model]
    assert [(o.prefix, o.module) for o in find_owners(lambda x: model(x))] == [("model", model)]
    assert [(o.prefix, o.module) for o in find_owners(_reads_global)] == [("_MODEL", _MODEL)]
    assert find_owners(torch.relu) == []


def test_owners_in_containers_and_shared_tensors_are_lifted_once():
    inner = torch.nn.Linear(2, 2)
    outer = torch.nn.Sequential(inner, torch.nn.Linear(2, 2))
    blocks = {"all": outer, "first": inner}
    state = ModuleState(find_owners(lambda x: blocks["first"](x) + blocks["all"](x)))
    assert state.names == ["blocks['all'].0.weight", "blocks['all'].0.bias", "blocks['all'].1.weight",
                           "blocks['all'].1.bias"]
    with StandIns(state.pairs([torch.zeros_like(t) for t in state.tensors])):
        assert inner.weight is outer[0].weight and not inner.weight.any()


def test_state_lists_params_then_buffers_and_substitutes_them():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    state = ModuleState(find_owners(model))
    assert state.names[:4] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert state.kinds == ["param"] * 4 + ["buffer"] * 3
    zeros = [torch.zeros_like(t) for t in state.tensors]
    with StandIns(state.pairs(zeros)):
        assert model[0].weight is state.tensors[0]  # the module is left as it is: other threads see its tensors
        assert torch.equal(model(torch.ones(3, 2)), torch.zeros(3, 2))  # torch calls in this thread see the zeros
        running_mean = model[1].running_mean
        assert running_mean.add_(1) is running_mean  # an in-place op gives back the real tensor, as it was called
        assert torch.equal(running_mean * 1, torch.ones(2))
    assert model[0].weight is state.tensors[0]
    assert torch.equal(running_mean, torch.zeros(2)) and torch.equal(zeros[4], torch.ones(2))  # the stand-in took it


def test_a_parameter_or_buffer_assigned_while_traced_is_put_back_and_refused():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    state = ModuleState(find_owners(model))
    weight, mean = model[0].weight, model[1].running_mean
    with pytest.raises(CaptureError, match=r"assigns 0\.weight, 1\.cache, 1\.running_mean while it runs"):
        with state.kept():
            model[0].weight = torch.nn.Parameter(torch.zeros(2, 2))
            model[1].running_mean = mean + 1
            model[1].cache = torch.ones(1)
    assert model[0].weight is weight and model[1].running_mean is mean and not hasattr(model[1], "cache")


def test_guard_fails_when_a_parameter_is_replaced_or_mode_changes():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    g = GuardBuilder()
    reads = find_reads(model)
    reads.add_checks(g)  # the modules' locals, which the state's checks start from
    ModuleState(reads.owners).add_checks(g)
    check, explain, _ = g.build()
    assert check([], None)
    model.eval()
    assert explain([], None) == "module Sequential: training changed from True to False"
    model.train()
    model[0].bias = torch.nn.Parameter(torch.zeros(2))
    assert not check([], None) and explain([], None) == "parameter 0.bias was replaced by another tensor"
