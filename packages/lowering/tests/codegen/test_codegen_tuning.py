"""The shared `Tuner` of the max-autotune modes: the fastest candidate kept (the heuristics' unless beaten by the
margin), written buffers restored after every launch, the choice stored and reused, a stored entry that is not
one of the candidates ignored."""

from __future__ import annotations

import importlib
import uuid

import pytest
import torch
from ember_core import record_events
from ember_lowering.codegen import TUNED_MODES, Tuner, tuning_mode

_tuning = importlib.import_module("ember_lowering.codegen._tuning")  # the module, for its clock


class Clock:
    """The tuner's clock in these tests: a launch takes exactly its candidate's seconds, whatever the machine's load
    (sleeps on a loaded CI machine woke late, and a candidate fell outside the 2x cut)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_tuning, "time", fake)
    return fake


def launcher(seconds: dict, out: torch.Tensor, runs: list):
    clock = _tuning.time

    def launch(choice):
        runs.append(choice)
        out.add_(1)  # a kernel that updates its buffer in place
        clock.now += seconds[choice]

    return launch


def test_the_fastest_candidate_is_kept_stored_and_reused_and_writes_are_restored():
    tuner, key = Tuner("test_tune", "test"), uuid.uuid4().hex
    out, runs = torch.zeros(4), []
    seconds = {(1,): 0.004, (2,): 0.0025, (3,): 0.003}  # each within 2x of the best before it: all measured
    with record_events() as rec:
        assert tuner.choose(key, "k", list(seconds), launcher(seconds, out, runs), [out]) == (2,)
    assert torch.equal(out, torch.zeros(4))  # every trial undone: the real call then runs once on it
    assert len(runs) == 3 * tuner.repeats
    (event,) = rec.kinds("kernel_tuned")
    assert event.get("choice") == [2] and event.get("candidates") == [[1], [2], [3]] and len(event.get("seconds")) == 3
    runs.clear()
    assert Tuner("test_tune", "test").choose(key, "k", list(seconds), launcher(seconds, out, runs), [out]) == (2,)
    assert runs == []  # from the disk


def test_a_candidate_twice_as_slow_as_the_best_so_far_is_launched_once():
    runs = []
    seconds = {(1,): 0.002, (2,): 0.04, (3,): 0.0025}  # 3 inside the 2x cut, 2 outside
    launch = launcher(seconds, torch.zeros(1), runs)
    Tuner("test_tune", "test").measure(uuid.uuid4().hex, "k", list(seconds), launch, [])
    assert runs.count((2,)) == 1 and runs.count((1,)) == runs.count((3,)) == 3


def test_a_long_kernel_is_launched_twice():
    runs = []
    seconds = {(1,): 0.015, (2,): 0.016}
    launch = launcher(seconds, torch.zeros(1), runs)
    assert Tuner("test_tune", "test").measure(uuid.uuid4().hex, "k", list(seconds), launch, []) == (1,)
    assert runs == [(1,), (1,), (2,), (2,)]


def test_an_interleaving_tuner_launches_every_candidate_once_a_round_and_keeps_each_ones_median():
    """A load that comes and goes (here: the first round runs three times slower) weighs on every candidate alike;
    no candidate is cut, however slow, a candidate's time is its median round, and writes are restored after each
    launch."""
    runs, out, slow = [], torch.zeros(2), [3.0]
    seconds = {(1,): 0.002, (2,): 0.0015, (3,): 0.004}  # 3: more than 2x the best, not cut here
    inner = launcher(seconds, out, runs)

    def launch(choice):
        start = _tuning.time.now
        inner(choice)
        _tuning.time.now = start + (_tuning.time.now - start) * slow[0]
        if len(runs) == len(seconds):
            slow[0] = 1.0

    tuner = Tuner("test_tune", "test", repeats=4, interleave=True)
    with record_events() as rec:
        assert tuner.measure(uuid.uuid4().hex, "k", list(seconds), launch, [out]) == (2,)
    assert runs == list(seconds) * 4 and torch.equal(out, torch.zeros(2))
    assert rec.kinds("kernel_tuned")[0].get("seconds") == pytest.approx(list(seconds.values()))
    runs.clear()  # candidates of 10 ms: three rounds take more than LONG (20 ms) a candidate, and are enough
    slow[0], long = 1.0, {(1,): 0.01, (2,): 0.012}
    Tuner("test_tune", "test", repeats=7, interleave=True).measure(uuid.uuid4().hex, "k", list(long),
                                                                    launcher(long, out, runs), [out])
    assert runs == list(long) * 3


def test_the_heuristics_choice_stays_unless_another_beats_it_by_the_margin():
    tuner = Tuner("test_tune", "test", margin=0.5)
    seconds = {(1,): 0.002, (2,): 0.0015}
    assert tuner.choose(uuid.uuid4().hex, "k", list(seconds), launcher(seconds, torch.zeros(1), []), []) == (1,)


def test_a_stored_entry_that_is_no_candidate_or_no_list_of_integers_is_not_used():
    tuner, key = Tuner("test_tune", "test"), uuid.uuid4().hex
    tuner.store(key, (9,), "k")
    assert tuner.stored(key, [(1,), (2,)]) is None
    for text in (b'{"choice": 1}', b'["1"]', b"[1.0]", b"\xff"):
        with tuner.cache.lock(key):
            tuner.cache.store(key, {"choice": text}, {})
        assert tuner.stored(key, [(1,)]) is None


def test_the_tuning_modes():
    assert TUNED_MODES == ("max-autotune", "max-autotune-no-cudagraphs")
    assert tuning_mode({"mode": "max-autotune"}) and not tuning_mode({"mode": "reduce-overhead"})
    assert not tuning_mode(None) and not tuning_mode({})
