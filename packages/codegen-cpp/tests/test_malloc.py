"""glibc's malloc thresholds: set once per process where glibc's own rule ends, unless the process chose already."""

import subprocess
import sys
import textwrap

import pytest
from ember_codegen_cpp import _malloc
from ember_codegen_cpp._malloc import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, chosen_elsewhere, tune_malloc


class FakeLibc:
    def __init__(self, answer=1):
        self.calls, self.answer = [], answer

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.answer


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(_malloc, "_outcome", None)  # as in a process that has compiled no CPU graph yet


def test_the_thresholds_are_set_once_per_process(fresh):
    libc = FakeLibc()
    assert tune_malloc({}, env={}, libc=libc).startswith("set glibc's malloc thresholds")
    assert libc.calls == [(M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 64 << 20)]
    tune_malloc({}, env={}, libc=libc)
    assert len(libc.calls) == 2 and _malloc.malloc_tuning().startswith("set")


@pytest.mark.parametrize("env", [{"MALLOC_TRIM_THRESHOLD_": "0"}, {"MALLOC_ARENA_MAX": "2"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1000000"},
                                 {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}])
def test_a_process_that_chose_its_malloc_keeps_it(fresh, env):
    libc = FakeLibc()
    assert tune_malloc({}, env=env, libc=libc).startswith("left glibc's malloc thresholds alone")
    assert libc.calls == [] and chosen_elsewhere(env)


def test_the_option_leaves_malloc_alone(fresh):
    libc = FakeLibc()
    assert "cpp.malloc='system'" in tune_malloc({"cpp.malloc": "system"}, env={}, libc=libc)
    assert libc.calls == []


def test_a_refusal_is_reported(fresh):
    assert tune_malloc({}, env={}, libc=FakeLibc(answer=0)).endswith("glibc refused the thresholds")


def test_other_tunables_are_not_malloc_ones():
    assert chosen_elsewhere({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}) is None
    assert chosen_elsewhere({"LD_PRELOAD": "/opt/lib/libfoo.so"}) is None


def test_compiling_a_cpu_graph_tunes_it(fresh, monkeypatch):
    seen = []
    monkeypatch.setattr("ember_codegen_cpp._codegen.tune_malloc", lambda options: seen.append(dict(options or {})))
    from ember_codegen_cpp import CppCodegen
    from ember_core import Graph
    CppCodegen().compile_lazily(Graph(), {"cpp.malloc": "system"})
    assert seen == [{"cpp.malloc": "system"}]


# A round allocates 12 buffers of 4 MiB, writes them and frees them all: 48 MiB at the heap's top at the end. With
# glibc's own thresholds (raised to 4 MiB, trim 8 MiB by the first round's frees) that top usually goes back to the
# system and the third round faults every page in again, but not always (it depends on what else the heap holds:
# 1,024 faults in one CI run); with the tuned ones it stays, but for one buffer's pages in some runs (0 or 1,024
# of 12,288 over eight runs: where glibc carves the round's small allocations decides it). The control fixes glibc's
# thresholds at their initial values (128 KiB), so that every buffer is mapped and unmapped each round whatever
# else the process did.
_ROUNDS = """
import resource, torch
{setup}
def round_():
    bufs = [torch.empty(1 << 20).fill_(1.0) for _ in range(12)]
    del bufs
round_(); round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(setup: str, **malloc_env: str) -> int:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_") and k != "LD_PRELOAD"}
    env.update(malloc_env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_ROUNDS.format(setup=setup))], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(_malloc._glibc() is None, reason="glibc only")
def test_buffers_freed_by_one_call_stay_mapped_for_the_next():
    initial = _faults("", MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    tuned = _faults("from ember_codegen_cpp._malloc import tune_malloc; print(tune_malloc({}))")
    pages = 12 * (4 << 20) // 4096
    assert initial > pages // 2, initial  # the control: low thresholds fault the round in again
    assert tuned < pages // 4, tuned
