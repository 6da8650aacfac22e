"""ember's disk caches across processes. The C++ codegen's cache repairs itself: whatever is found at an entry's
paths, the next compile of that graph misses, removes the bad entry, rebuilds it and returns eager's results. A
warm process reuses every stage after capture (partitions, kernel plans, libraries), with the compile counts of
torch.compile under dynamic shapes; a bad entry of any of the three caches is rebuilt with a logged reason; a
change of options or of requires_grad misses."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import ember
import ember_codegen_cpp._loader
import ember_runtime
import pytest
import torch
from ember_codegen_cpp import cache_dir, compiler
from ember_core.caches._root import signing_key
from ember_core.caches._sidecar import sign
from ember_core.testing import restamp
from ember_runtime import record_events
from models import MLP

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """A cache of this test's own, and no in-process copy of any graph or library."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    ember_runtime.clear_cache()


def compile_and_check(k: float) -> list:
    """Compile x*k+1 afresh (a new dynamo cache, no in-memory hit), run it, return the codegen-cpp events."""
    torch._dynamo.reset()
    ember_runtime.clear_cache()
    ember_codegen_cpp._loader._loaded.clear()
    f = ember.compile(lambda x: torch.relu(x) * k + 1, options={"frontend": "trace"})
    x = torch.randn(4, 8)
    with record_events() as rec:
        torch.testing.assert_close(f(x), torch.relu(x) * k + 1)
    return [e for e in rec.events if e.stage == "codegen-cpp" and e.kind in BUILD_KINDS]


BUILD_KINDS = {"build_cache_hit": "hit", "build_cache_miss": "miss"}  # the build cache's kinds


def outcomes(events: list) -> list[str]:
    return [BUILD_KINDS[e.kind] for e in events]


def only_entry() -> dict[str, str]:
    """The paths of the cache's single entry, by role."""
    sidecars = [p for p in cache_dir().iterdir() if p.suffix == ".json"]
    assert len(sidecars) == 1, sorted(p.name for p in cache_dir().iterdir())
    key = sidecars[0].stem
    return {"sidecar": str(sidecars[0]), "library": str(cache_dir() / f"{key}.so"),
            "source": str(cache_dir() / f"{key}.cpp")}


def replace_with(path: str, make) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
    make(path)


def write(data: bytes):
    def make(path: str) -> None:
        with open(path, "wb") as f:
            f.write(data)
    return make


def sidecar_with(**fields):
    """The entry's sidecar with some fields replaced (the rest kept valid)."""
    def corrupt(paths: dict[str, str]) -> None:
        with open(paths["sidecar"]) as f:
            meta = json.load(f)
        meta.update(fields)
        replace_with(paths["sidecar"], write(json.dumps(meta).encode()))
    return corrupt


def at(role: str, make):
    return lambda paths: replace_with(paths[role], make)


def truncate_library(paths: dict[str, str]) -> None:
    with open(paths["library"], "rb") as f:
        data = f.read()
    replace_with(paths["library"], write(data[: len(data) // 2]))


def symlink_outside(role: str):
    def corrupt(paths: dict[str, str]) -> None:
        outside = os.path.join(os.path.dirname(os.path.dirname(paths[role])), "outside.txt")
        with open(outside, "w") as f:
            f.write("not ember's")
        replace_with(paths[role], lambda p: os.symlink(outside, p))
    return corrupt


def unreadable(role: str):
    return lambda paths: os.chmod(paths[role], 0)


CORRUPTIONS = {
    "sidecar-garbage-bytes": at("sidecar", write(b"\x00\xff\xfe garbage \x89PNG")),
    "sidecar-empty": at("sidecar", write(b"")),
    "sidecar-list": at("sidecar", write(b"[]")),
    "sidecar-number": at("sidecar", write(b"5")),
    "sidecar-key-int": sidecar_with(key=5),
    "sidecar-files-nested-garbage": sidecar_with(files={"so": [[{"x": None}]], "cpp": {"a": [1, 2]}}),
    "sidecar-huge-number": at("sidecar", write(b'{"key": ' + b"9" * 5000 + b"}")),
    "sidecar-deep-nesting": at("sidecar", write(b"[" * 20000 + b"]" * 20000)),
    "sidecar-directory": at("sidecar", os.mkdir),
    "library-directory": at("library", os.mkdir),
    "source-directory": at("source", os.mkdir),
    "library-empty": at("library", write(b"")),
    "library-truncated": truncate_library,
    "library-missing": lambda paths: os.unlink(paths["library"]),
    "sidecar-symlink-outside": symlink_outside("sidecar"),
    "library-symlink-outside": symlink_outside("library"),
    "library-fifo": at("library", os.mkfifo),
    "sidecar-fifo": at("sidecar", os.mkfifo),
    "sidecar-unreadable": unreadable("sidecar"),
    "library-unreadable": unreadable("library"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_entry_is_rebuilt_and_gives_eager_results(case, tmp_path):
    k = 1.5 + sorted(CORRUPTIONS).index(case) / 8
    first = compile_and_check(k)
    assert outcomes(first) == ["miss"]
    paths = only_entry()
    CORRUPTIONS[case](paths)
    second = compile_and_check(k)
    if "unreadable" in case and os.getuid() == 0:  # root reads a file of mode 0: the entry is still good
        assert outcomes(second) in (["hit"], ["miss"])
    else:
        assert outcomes(second) == ["miss"], [e.message for e in second]
    repaired = only_entry()
    for role in ("sidecar", "library", "source"):
        st = os.lstat(repaired[role])
        assert stat.S_ISREG(st.st_mode), f"{role} is not a regular file after the rebuild"
    assert (tmp_path / "cache" / "outside.txt").exists() or "symlink" not in case
    third = compile_and_check(k)
    assert outcomes(third) == ["hit"]


def test_a_sidecar_of_the_wrong_type_costs_one_rebuild_only():
    compile_and_check(7.25)
    paths = only_entry()
    replace_with(paths["sidecar"], write(b"[]"))
    assert outcomes(compile_and_check(7.25)) == ["miss"]
    assert outcomes(compile_and_check(7.25)) == ["hit"]


# ---------------------------------------------------------------------------------------------- warm start
# A second process compiling the same programs reuses everything ember computed after capture: the partition of
# each training graph (runtime, cache `partitions`), the kernel plan of each compiled graph (lowering, `plans`)
# and each built library (codegen-cpp, `cpp`).

WARM_PROGRAMS = ("train", "inference", "decode", "decode_dynamic", "sweep")


def run_programs(cache: Path, names=WARM_PROGRAMS) -> tuple[dict, str]:
    """The programs' results in a fresh process on the cache `cache`, and its log (EMBER_LOGS=cache)."""
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache), "EMBER_LOGS": "cache"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("_warm_programs.py")), *names], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def cold_then_warm(tmp_path_factory):
    """A cold process, then a warm one on the same cache: their results and logs."""
    cache = tmp_path_factory.mktemp("warm-start") / "cache"
    cold, cold_log = run_programs(cache, (*WARM_PROGRAMS, "train_tuned"))
    warm, warm_log = run_programs(cache, (*WARM_PROGRAMS, "train_tuned"))
    return {"cold": cold, "warm": warm, "cold_log": cold_log, "warm_log": warm_log}


def count(result: dict, kind: str, stage: str) -> int:
    return result["events"].get(f"{kind}/{stage}", 0)


STAGE_WORK = (("joint_traced", "autograd"), ("partitioned", "partition"), ("kernels_planned", "lowering"))
MISSES = (("disk_cache_miss", "runtime"), ("disk_cache_miss", "lowering"), ("build_cache_miss", "codegen-cpp"))


@pytest.mark.parametrize("program", WARM_PROGRAMS)
def test_a_warm_process_takes_every_graph_from_the_disk_caches(cold_then_warm, program):
    cold, warm = cold_then_warm["cold"][program], cold_then_warm["warm"][program]
    graphs = count(warm, "graph_compiled", "codegen")
    training = 1 if program == "train" else 0
    assert count(cold, "graph_compiled", "codegen") == graphs == (2 if program in ("train", "decode", "sweep") else 1)
    assert count(cold, "disk_cache_miss", "lowering") == count(cold, "kernels_planned", "lowering") == graphs
    assert count(cold, "disk_cache_miss", "runtime") == count(cold, "joint_traced", "autograd") == training
    assert count(warm, "disk_cache_hit", "lowering") == count(warm, "build_cache_hit", "codegen-cpp") == graphs
    assert count(warm, "disk_cache_hit", "runtime") == training
    assert not [k for k in (*STAGE_WORK, *MISSES) if count(warm, *k)], warm["events"]


@pytest.mark.parametrize("program", ("decode", "decode_dynamic", "sweep"))
def test_a_warm_process_compiles_as_often_as_torch_compile_and_reuses_the_symbolic_kernels(cold_then_warm, program):
    cold, warm = cold_then_warm["cold"][program], cold_then_warm["warm"][program]
    want = {"decode": 2, "decode_dynamic": 1, "sweep": 2}[program]
    assert count(cold, "graph_captured", "capture") == count(warm, "graph_captured", "capture") == want
    assert cold["torch_graphs"] == warm["torch_graphs"] == want
    assert count(warm, "disk_cache_hit", "lowering") == want and not count(warm, "kernels_planned", "lowering")


def test_a_warm_process_reuses_the_kernel_variants_max_autotune_chose(cold_then_warm):
    """mode="max-autotune": the cold process measures kernel variants (one `kernel_tuned` event per kernel with
    several); the warm one takes every choice from the disk (cache `cpp_tune`) and measures nothing."""
    cold, warm = cold_then_warm["cold"]["train_tuned"], cold_then_warm["warm"]["train_tuned"]
    assert count(cold, "kernel_tuned", "codegen-cpp") >= 3, cold["events"]
    assert count(warm, "kernel_tuned", "codegen-cpp") == 0
    assert count(warm, "build_cache_hit", "codegen-cpp") == 2


def test_disk_hits_and_misses_are_logged_under_ember_logs_cache(cold_then_warm):
    assert "no partition in the disk cache" in cold_then_warm["cold_log"]
    assert "no kernel plan in the disk cache" in cold_then_warm["cold_log"]
    assert "partition from the disk cache" in cold_then_warm["warm_log"]
    assert "kernel plan from the disk cache" in cold_then_warm["warm_log"]


# ---------------------------------------------------------------------------------------------- a bad entry
# Every kind of file of the three caches, damaged: the stage it belongs to misses with a logged reason that names
# the file, computes its result again, and the step still equals eager; the next process hits again.


def training_step() -> list:
    """A training step of a small MLP compiled as a fresh process would (no in-process graph or library); its
    events. Outputs and gradients equal eager's."""
    torch._dynamo.reset()
    ember_runtime.clear_cache()
    ember_codegen_cpp._loader._loaded.clear()
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 16)
    model(x).pow(2).mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with record_events() as rec:
        out = ember.compile(model)(x)
        out.pow(2).mean().backward()
    torch.testing.assert_close(out, model(x))
    for p, g in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, g)
    return rec.events


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache holding the MLP's partition, plans and libraries, made once for this module's tests to copy."""
    root = tmp_path_factory.mktemp("warm-cache") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_CACHE_DIR", str(root))
        mp.setattr("ember_codegen_cpp._loader._loaded", {})
        training_step()
    return root


def files(root: Path, cache: str, suffix: str) -> list[Path]:
    found = sorted((root / cache).glob(f"*.{suffix}"))
    assert found, f"no .{suffix} file in {root / cache}"
    return found


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for k in range(len(data) // 2, min(len(data), len(data) // 2 + 8)):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def restamped(change):
    """Rewrite an entry's file with `change(text)` and its sidecar's sha256 to match: a consistent entry that is
    wrong inside, as an entry an older ember wrote would be."""
    def corrupt(path: Path) -> None:
        restamp(path, change(path.read_text()).encode())
    return corrupt


def json_field(**fields):
    def change(text: str) -> str:
        return json.dumps({**json.loads(text), **fields})
    return change


def sidecar_with_fields(meta: dict | None = None, **fields):
    """The sidecar with top-level fields (its format version `ember_cache`) or facts in its meta replaced, signed
    again with this user's key (as an older ember of this user's could have written it)."""
    def corrupt(path: Path) -> None:
        data = json.loads(path.read_text())
        data.update(fields)
        data["meta"].update(meta or {})
        data.pop("mac")
        path.write_text(json.dumps(sign(data, signing_key(path.parent))))
    return corrupt


# (cache, suffix, corruption) → (stage whose miss it causes, what the reason says)
BAD_ENTRIES = {
    "partition-flipped": ("partitions", "graphs", flip, "runtime", "does not match its recorded sha256"),
    "partition-truncated": ("partitions", "graphs", truncate, "runtime", "does not match its recorded sha256"),
    "partition-truncated-json": ("partitions", "graphs", restamped(lambda t: t[: len(t) // 2]), "runtime",
                                 "not JSON"),
    "partition-wrong-version": ("partitions", "graphs", restamped(json_field(version=2)), "runtime",
                                "version: entry format version 2 is not 1"),
    "partition-graph-wrong-version": ("partitions", "graphs", restamped(
        lambda t: t.replace('"version":[1,', '"version":[7,', 1)), "runtime", "schema version 7."),
    "partition-sidecar-flipped": ("partitions", "json", flip, "runtime", "sidecar"),
    "partition-sidecar-wrong-version": ("partitions", "json", sidecar_with_fields(ember_cache=1), "runtime",
                                        "sidecar format 1 is not 2"),
    "plan-flipped": ("plans", "plan", flip, "lowering", "does not match its recorded sha256"),
    "plan-truncated": ("plans", "plan", restamped(lambda t: t[: len(t) // 2]), "lowering", "line"),
    "plan-sidecar-truncated": ("plans", "json", truncate, "lowering", "sidecar is not JSON"),
    "plan-sidecar-wrong-version": ("plans", "json", sidecar_with_fields({"format": "ember loop-IR text 0"}),
                                   "lowering", "its format differs"),
    "library-sidecar-wrong-version": ("cpp", "json", sidecar_with_fields(ember_cache=0), "codegen-cpp",
                                      "sidecar format 0 is not 2"),
    "library-flipped": ("cpp", "so", flip, "codegen-cpp", "does not match its recorded sha256"),
    "source-flipped": ("cpp", "cpp", flip, "codegen-cpp", "does not match its recorded sha256"),
}


@pytest.fixture
def copy_of_warm_cache(warm_cache, tmp_path, monkeypatch):
    root = tmp_path / "copied"
    shutil.copytree(warm_cache, root)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(root))
    return root


def outcome(events, stage: str) -> list[str]:
    """The disk-cache results a stage reported, in order (`hit`, `miss`)."""
    kinds = {"disk_cache_hit": "hit", "build_cache_hit": "hit", "disk_cache_miss": "miss", "build_cache_miss": "miss"}
    return [kinds[e.kind] for e in events if e.stage == stage and e.kind in kinds]


STAGES = ("runtime", "lowering", "codegen-cpp")


def test_the_copied_warm_cache_hits_for_every_graph(copy_of_warm_cache):
    events = training_step()
    assert {stage: outcome(events, stage) for stage in STAGES} == {
        "runtime": ["hit"], "lowering": ["hit", "hit"], "codegen-cpp": ["hit", "hit"]}


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_a_bad_entry_is_rebuilt_with_a_logged_reason_naming_its_file(copy_of_warm_cache, case, caplog):
    cache, suffix, corrupt, stage, says = BAD_ENTRIES[case]
    bad = files(copy_of_warm_cache, cache, suffix)
    for path in bad:
        corrupt(path)
    with caplog.at_level("WARNING", logger="ember.cache"):
        events = training_step()  # equal to eager, or it raises
    misses = [e for e in events if e.stage == stage and e.kind in ("disk_cache_miss", "build_cache_miss")]
    assert len(misses) == len(bad) and all(says in e.data["reason"] for e in misses), [e.message for e in events]
    for path in bad:
        assert str(path.with_suffix("")) in caplog.text, caplog.text
    if stage == "runtime":
        assert [e.kind for e in events].count("joint_traced") == 1
    others = [s for s in STAGES if s != stage]
    assert all("miss" not in outcome(events, s) for s in others), {s: outcome(events, s) for s in STAGES}
    again = training_step()
    assert all(outcome(again, s) and set(outcome(again, s)) == {"hit"} for s in STAGES)


# ---------------------------------------------------------------------------------------------- what misses


def partition_outcome(options=None, grad_x: bool = False) -> list[str]:
    """A training step of the MLP compiled as a fresh process would, with `options` and x requiring grad or not:
    what the partition cache said. Gradients equal eager's."""
    torch._dynamo.reset()
    ember_runtime.clear_cache()
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 16)
    mine, theirs = (x.clone().requires_grad_(grad_x) for _ in range(2))
    with record_events() as rec:
        ember.compile(model, options=options)(mine).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model(theirs).sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    if grad_x:
        torch.testing.assert_close(mine.grad, theirs.grad)
    return outcome(rec.events, "runtime")


def test_other_options_miss_the_partition():
    assert partition_outcome() == ["miss"]
    assert partition_outcome() == ["hit"]
    assert partition_outcome({"partition": "default"}) == ["miss"]
    assert partition_outcome({"cache": False}) == []


def test_an_input_that_now_requires_grad_misses_the_partition():
    assert partition_outcome() == ["miss"]
    assert partition_outcome(grad_x=True) == ["miss"]
    assert partition_outcome(grad_x=True) == ["hit"]
