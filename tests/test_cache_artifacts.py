"""Portable cache artifacts: a model compiled on one machine, its cache saved (`ember.cache.save`), loads warm in a
fresh container-like environment (a fresh HOME, no cache directory, no EMBER_CACHE_DIR) after `ember.cache.load`;
entries for another machine or version, or code in a file someone else could have written, are skipped with the
reason; a damaged file is an error naming where."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from ember._cli import main as ember_cli
from ember_core.caches import ArtifactError, load_artifact
from ember_core.caches import _directory as _cache_dir
from ember_core.caches._artifacts import MAGIC
from ember_core.caches._packed import pack, unpack

PROGRAMS = ("train", "inference")
STAGE_WORK = (("joint_traced", "autograd"), ("partitioned", "partition"), ("kernels_planned", "lowering"))
MISSES = (("disk_cache_miss", "runtime"), ("disk_cache_miss", "lowering"), ("build_cache_miss", "codegen-cpp"))


def fresh_machine(home: Path) -> dict:
    """The environment of a fresh container: its own HOME, no cache settings, no team key."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("EMBER_CACHE_DIR", "XDG_CACHE_HOME", "EMBER_CACHE_KEY", "EMBER_CACHE_KEY_FILE",
                        "EMBER_REMOTE_CACHE")}
    home.mkdir(parents=True)
    return {**env, "HOME": str(home)}


def run(env: dict, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("_warm_programs.py")), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """Machine A compiles and saves an artifact; machine B, fresh, loads it and compiles the same programs."""
    tmp = tmp_path_factory.mktemp("artifacts")
    artifact = tmp / "model.ember-cache"
    built = run(fresh_machine(tmp / "a"), *PROGRAMS, "--save", str(artifact))
    loaded = run(fresh_machine(tmp / "b"), *PROGRAMS, "--load", str(artifact))
    return {"built": built, "loaded": loaded, "artifact": artifact, "tmp": tmp}


def count(result: dict, kind: str, stage: str) -> int:
    return result["events"].get(f"{kind}/{stage}", 0)


def test_the_artifact_holds_what_the_process_compiled(shipped):
    saved = shipped["built"]["artifact"]
    caches = {cache for cache, _ in saved["entries"]}
    assert {"partitions", "plans", "cpp"} <= caches and not saved["skipped"]
    assert (shipped["tmp"] / "b" / ".cache" / "ember" / "cpp").is_dir()  # B's default cache root, made fresh


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_fresh_machine_compiles_warm_from_the_artifact(shipped, program):
    built, loaded = shipped["built"][program], shipped["loaded"][program]
    assert shipped["loaded"]["artifact"]["skipped"] == []
    assert len(shipped["loaded"]["artifact"]["entries"]) == len(shipped["built"]["artifact"]["entries"])
    graphs = count(loaded, "graph_compiled", "codegen")
    assert graphs == count(built, "graph_compiled", "codegen") >= 1
    assert count(built, "build_cache_miss", "codegen-cpp") >= 1  # A compiled cold
    assert count(loaded, "disk_cache_hit", "lowering") == count(loaded, "build_cache_hit", "codegen-cpp") == graphs
    assert not [k for k in (*STAGE_WORK, *MISSES) if count(loaded, *k)], loaded["events"]


def rewritten(artifact: Path, out: Path, change) -> Path:
    """A copy of `artifact` whose entries went through `change(entry) -> entry` (unsigned, as this user wrote)."""
    data, blobs, at = artifact.read_bytes(), [], len(MAGIC)
    while at < len(data):
        (size,) = struct.unpack(">Q", data[at:at + 8])
        entry = change(unpack(data[at + 8:at + 8 + size], None))
        blob = pack(entry, None)
        blobs += [struct.pack(">Q", len(blob)), blob]
        at += 8 + size
    out.write_bytes(MAGIC + b"".join(blobs))
    out.chmod(0o600)
    return out


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_CACHE_KEY", raising=False)
    monkeypatch.delenv("EMBER_CACHE_KEY_FILE", raising=False)
    _cache_dir.forget_opened()
    yield tmp_path
    _cache_dir.forget_opened()


def test_entries_for_another_machine_or_version_are_skipped_with_the_reason(shipped, fresh_cache):
    def other(entry):
        if entry.cache == "cpp":
            return replace(entry, machine={**entry.machine, "cpu": "0123456789abcdef"})
        return replace(entry, machine={**entry.machine, "torch": "2.0.0"})

    report = load_artifact(rewritten(shipped["artifact"], fresh_cache / "other.ember-cache", other))
    assert report.entries == [] and len(report.skipped) == len(shipped["built"]["artifact"]["entries"])
    reasons = {cache: reason for cache, _, reason in report.skipped}
    assert reasons["cpp"].startswith("built for cpu 0123456789abcdef (this machine: ")
    assert reasons["plans"].startswith("built for torch 2.0.0 (this machine: ")


def test_code_in_a_file_others_may_write_is_skipped_unless_signed(shipped, fresh_cache):
    shared = fresh_cache / "shared.ember-cache"
    shared.write_bytes(shipped["artifact"].read_bytes())
    shared.chmod(0o666)
    report = load_artifact(shared)
    skipped = {cache for cache, _, _ in report.skipped}
    assert skipped == {"cpp"} and {"plans", "partitions"} <= {cache for cache, _ in report.entries}
    assert all("holds code" in reason for _, _, reason in report.skipped)


def test_a_truncated_artifact_is_an_error_naming_where(shipped, fresh_cache, capsys):
    cut = fresh_cache / "cut.ember-cache"
    cut.write_bytes(shipped["artifact"].read_bytes()[:-10])
    cut.chmod(0o600)
    with pytest.raises(ArtifactError, match=r"entry \d+ at byte \d+ says \d+ bytes, more than the file has left"):
        load_artifact(cut)
    assert ember_cli(["cache", "load", str(cut)]) == 2
    assert "more than the file has left" in capsys.readouterr().err
    junk = fresh_cache / "junk"
    junk.write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(ArtifactError, match="not an ember cache artifact"):
        load_artifact(junk)


def test_a_changed_byte_skips_that_entry_only(shipped, fresh_cache):
    data = bytearray(shipped["artifact"].read_bytes())
    data[-1] ^= 1  # the last file of the last entry
    bad = fresh_cache / "bad.ember-cache"
    bad.write_bytes(bytes(data))
    bad.chmod(0o600)
    report = load_artifact(bad)
    assert len(report.skipped) == 1 and "sha256" in report.skipped[0][2]
    assert len(report.entries) == len(shipped["built"]["artifact"]["entries"]) - 1


def test_the_cli_saves_every_local_entry_and_loads_them(shipped, fresh_cache, monkeypatch, capsys):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(shipped["tmp"] / "a" / ".cache" / "ember"))
    _cache_dir.forget_opened()
    out = fresh_cache / "all.ember-cache"
    assert ember_cli(["cache", "save", str(out)]) == 0
    saved = capsys.readouterr().out
    assert saved.startswith("wrote ") and f"to {out}" in saved
    monkeypatch.setenv("EMBER_CACHE_DIR", str(fresh_cache / "cache"))
    _cache_dir.forget_opened()
    assert ember_cli(["cache", "load", str(out)]) == 0
    assert capsys.readouterr().out.split()[1] == saved.split()[1]  # as many entries loaded as saved


CUDA_PROGRAM = """
import json, sys
from collections import Counter

import ember, torch, triton
from ember_core import record_events

mode, path = sys.argv[1], sys.argv[2]
if mode == "load":
    report = ember.cache.load(path)
    assert report.entries and not report.skipped, report
compiled_by_jit = []
triton.knobs.compilation.listener = lambda **info: compiled_by_jit.append(not info["cache_hit"])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128)).cuda()
x = torch.randn(32, 64, device="cuda")
with record_events() as rec:
    out = ember.compile(model)(x)
    out.sum().backward()
want = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
ref = model(x)
ref.sum().backward()
torch.testing.assert_close(out, ref)
for p, g in zip(model.parameters(), want):
    torch.testing.assert_close(g, p.grad)
if mode == "save":
    ember.cache.save(path)
print(json.dumps({"events": Counter(f"{e.kind}/{e.stage}" for e in rec.events), "jit": sum(compiled_by_jit)}))
"""


@pytest.mark.gpu
def test_a_cuda_training_step_loads_warm_from_an_artifact_on_a_fresh_machine(tmp_path):
    """On a GPU: the artifact carries the Triton modules with their compiled kernels (the manifest holds the
    binaries), so a fresh machine binds every kernel without Triton's JIT."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    artifact = tmp_path / "cuda.ember-cache"

    def child(home: str, mode: str) -> dict:
        env = fresh_machine(tmp_path / home)
        env.pop("TRITON_INTERPRET", None)
        env.pop("TRITON_CACHE_DIR", None)
        done = subprocess.run([sys.executable, "-c", CUDA_PROGRAM, mode, str(artifact)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = child("a", "save")
    warm = child("b", "load")
    assert cold["events"].get("build_cache_miss/codegen-triton", 0) >= 1, cold
    assert warm["events"].get("build_cache_hit/codegen-triton", 0) == cold["events"]["build_cache_miss/codegen-triton"]
    assert not warm["events"].get("build_cache_miss/codegen-triton") and warm["jit"] == 0, warm
    assert not warm["events"].get("kernels_planned/lowering") and not warm["events"].get("joint_traced/autograd")
