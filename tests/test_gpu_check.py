"""`./dev gpu` cannot rot without a GPU: its dry run (tools/gpu_check.py --dry-run) runs every step on the CPU, in
Triton's interpreter and tiny sizes, end to end; and the real mode on a machine without CUDA fails loudly, every GPU
step reported missing."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["setup", "gpu-tests", "opinfo", "models", "bench"]


def gpu_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_OPTIONS", "TRITON_INTERPRET", "EMBER_CACHE_DIR")}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=ROOT)


def rows(summary: str) -> dict[str, list[str]]:
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in summary.splitlines() if line.startswith("| ")]
    return {c[0]: c[1:] for c in cells[1:]}


def test_dry_run_runs_every_step_on_the_cpu(tmp_path):
    logs = tmp_path / "gpu-logs"
    done = gpu_check("--dry-run", "--logs", str(logs), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    table = rows((logs / "summary.md").read_text())
    assert list(table) == STEPS, table
    assert all(row[0] == "pass" for row in table.values()), table
    assert re.fullmatch(r"\d+ gpu tests collected \(dry run: not run\)", table["gpu-tests"][2])
    assert int(table["gpu-tests"][2].split()[0]) >= 60  # packages' and integration gpu tests, one collection
    assert table["models"][2].startswith("3 ok, 0 failed")
    assert "kernel time n/a" in table["bench"][2]
    setup = (logs / "01-setup.log").read_text()
    assert "TRITON_INTERPRET=1" in setup and "codegen    triton" in setup and not re.search("^problem:", setup, re.M)
    assert sorted(p.name for p in logs.glob("*.log")) == [f"{i:02d}-{s}.log" for i, s in enumerate(STEPS, 1)]
    assert list((logs / "opinfo").glob("ember-float32-shard-0-of-1.jsonl"))
    assert "| bench | pass |" in done.stdout  # the table is printed too


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the real mode where there is no CUDA device")
def test_real_mode_without_cuda_fails_every_step(tmp_path):
    logs = tmp_path / "gpu-logs"
    done = gpu_check("--logs", str(logs), "--only", "models", timeout=300)
    assert done.returncode == 1
    table = rows((logs / "summary.md").read_text())
    assert table["setup"][0] == "FAIL" and "no CUDA device" in table["setup"][2]
    assert table["models"][:1] == ["missing"]
    assert "./dev gpu: FAILED: setup, models" in done.stderr


def test_the_expecttest_stand_in_lets_the_opinfo_step_run(tmp_path):
    """The GPU machines have no `expecttest`, which torch's OpInfo database imports (`./dev gpu`'s opinfo step
    failed at its import on an H100): tools/shims stands in, first on the path here so that it shadows the real
    one, and the step's own command runs an op through it."""
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_OPTIONS", "TRITON_INTERPRET")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "tools" / "shims"), env.get("PYTHONPATH", "")]),
               EMBER_CACHE_DIR=str(tmp_path / "cache"))
    which = subprocess.run([sys.executable, "-c", "import expecttest; print(expecttest.__file__)"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert Path(which.stdout.strip()) == ROOT / "tools" / "shims" / "expecttest.py", which.stderr
    done = subprocess.run([sys.executable, "-m", "tests.opinfo", "run", "--samples", "1", "--out",
                           str(tmp_path / "out"), "--device", "cpu", "--dtype", "float32", "--ops", "add,softmax",
                           "--jobs", "1"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = [json.loads(line) for line in (tmp_path / "out" / "ember-float32-shard-0-of-1.jsonl").open()]
    assert [(r["op"], r["phase"], r["status"]) for r in results] == [
        (op, phase, "pass") for op in ("add", "softmax") for phase in ("forward", "backward")], results


def test_after_a_model_loses_the_cuda_context_the_rest_run_in_a_fresh_process(tmp_path, monkeypatch, capsys):
    """`./dev gpu`'s models step ran every case in one process: on the H100 of 2026-12-06 the first model's illegal
    memory access failed the five after it at their first CUDA call. The case that lost the context fails; the
    others run in a new process and count as they come out."""
    spec = importlib.util.spec_from_file_location("gpu_models_tool", ROOT / "tools" / "gpu_models.py")
    models = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, models)  # its dataclasses look their module up
    spec.loader.exec_module(models)

    def first_loses_the_context(case, device, calls):
        if case.name.endswith("infer-bf16"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        raise AssertionError("the cases after it must not run in this process")

    monkeypatch.setattr(models, "run_case", first_loses_the_context)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    assert models.main(["--device", "cpu", "--tiny"]) == 1
    out = capsys.readouterr().out
    assert "the CUDA context is lost; TinyGPT train-fp32, TinyGPT train-autocast run in a fresh process" in out, out
    cases = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(c["case"], c["ok"]) for c in cases] == [("SmallCNN infer-bf16", False), ("TinyGPT train-fp32", True),
                                                     ("TinyGPT train-autocast", True)], out
    assert out.rstrip().endswith("models: 2 ok, 1 failed")


def test_the_bench_step_uses_the_time_the_other_steps_left(tmp_path, monkeypatch):
    """The bench step runs last with 150 s kept for it; on the H100 its four workloads needed more and were cut off
    while the run had minutes left. A step that `extends` runs on into what the run has left."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("gpu_check_tool", ROOT / "tools" / "gpu_check.py")
    check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, check)
    spec.loader.exec_module(check)
    judge = lambda rc, out, dry: (rc == 0, "ran")  # noqa: E731
    sleep = lambda s: [sys.executable, "-c", f"import time; time.sleep({s})"]  # noqa: E731
    steps = [check.Step("setup", "setup", 10, sleep(0), judge), check.Step("tests", "tests", 10, sleep(0.2), judge),
             check.Step("capped", "bench", 5, sleep(6), judge),  # 5 s: the least a step is started with
             check.Step("bench", "bench", 5, sleep(6), judge, extends=True)]
    (tmp_path / "logs").mkdir()
    outcomes = check.Runner(steps, dict(os.environ), tmp_path / "logs", 30, False).run()
    assert [(o.step.name, o.status) for o in outcomes] == [("setup", "pass"), ("tests", "pass"),
                                                           ("capped", "TIMEOUT"), ("bench", "pass")], outcomes
