"""`./dev gpu`: every GPU check of ember in one command, on a GPU machine as it comes, in at most 8 minutes.

    python3 tools/gpu_check.py [--dry-run] [--logs DIR] [--only STEP,...] [--budget SECONDS] [--list]

What the machine needs: a Python with torch (CUDA), Triton and pytest; pytest-xdist, timm and transformers are used
when present. Nothing is downloaded or installed. ember is imported from this checkout: every step's PYTHONPATH
holds every packages/*/src and, first, a temporary folder with a dist-info per package (name, version, entry points:
tools/packages.py), because ember finds its plugins (and pytest its plugin, Dynamo the `ember` backend) through
importlib.metadata entry points, which need a dist-info; `pip install -e` would need the build backend (poetry-core)
and maybe an index. Installed ember packages, if any, are shadowed: the setup step checks that every module and
every entry point comes from the checkout. Where `expecttest` is not installed (the H100 of 2026-12-06 had none),
the path ends with tools/shims, whose stand-in lets torch's OpInfo database import.

Steps (each its own process, log and time limit; the steps of a lane run in order, lanes side by side; the
benchmark runs last and alone, so that its timings are its own):
  setup        versions, the GPU, where ember is imported from, `ember plugins`; no CUDA device fails here and
               every later step is reported `missing` (a failure)
  gpu-tests    `pytest -m gpu` over every test file that marks a test `gpu` (packages/*/tests, tests/), with
               pytest-xdist when present; real kernels (TRITON_INTERPRET=0, and codegen-triton's conftest compiles
               gpu tests for the GPU whatever the environment says); a gpu test skipped for want of CUDA fails it
  opinfo       tests/opinfo on CUDA: the CI subset's ops (tests/test_opinfo_subset.py), forward and backward,
               float32 and bfloat16, one sample each, against eager; any failure fails the step
  models       tools/gpu_models.py: timm resnet18, transformers GPT-2 and Llama from configs (else tests/models.py):
               inference in bfloat16, training in float32 and under autocast, against eager
  bench        benchmarks/gpu.py on a few workloads: wall and kernel time, eager / Inductor / ember, each checked
               against eager first; 150 s are kept for it, and it may also use what the other steps left
Each step writes gpu-logs/NN-STEP.log (`--logs`); the table is printed and written to gpu-logs/summary.md, and the
exit status is 1 unless every step passed.

`--dry-run` checks the runner on a CPU: the same steps in tiny sizes, kernels in Triton's interpreter
(TRITON_INTERPRET=1, `codegen.cpu` = triton) on CPU tensors, gpu tests only collected (they need CUDA), Inductor
left out of the benchmark. tests/test_gpu_check.py runs it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import packages  # tools/packages.py, beside this file

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 480.0
GPU_MARK = re.compile(r"mark\.gpu\b|marks=\[?pytest\.mark\.gpu|pytestmark\s*=.*\bgpu\b")
# benchmarks/gpu.py's workloads the real run times (first words or names: its --only)
BENCH_REAL = "pointwise chain 64M,softmax 8192x4096,transformer block train step,batch norm train step"


@dataclasses.dataclass
class Step:
    name: str
    lane: str  # "setup" runs first, "bench" last; the others side by side
    budget_s: float
    argv: list[str]
    judge: Callable[[int, str, bool], tuple[bool, str]]  # (exit status, output, dry) -> (passed, what ran)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    extends: bool = False  # runs on past budget_s (what is kept for it) into whatever the run has left


@dataclasses.dataclass
class Outcome:
    step: Step
    status: str  # pass | FAIL | TIMEOUT | missing | not run
    seconds: float
    result: str
    log: Path | None


# ---------------------------------------------------------------------------------------------- judging output


def last_line(output: str, pattern: str) -> str:
    found = re.findall(pattern, output, flags=re.M)
    return found[-1].strip() if found else ""


def failure(rc: int, out: str) -> str:
    """What a step that printed no summary died of: its exit status and last line (the exception, usually)."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return f"exit {rc}: {lines[-1][:200]}" if lines else f"exit {rc}"


def judge_setup(rc: int, out: str, dry: bool) -> tuple[bool, str]:
    summary = last_line(out, r"^setup: (.*)$")
    return rc == 0, summary or failure(rc, out)


def judge_pytest(rc: int, out: str, dry: bool) -> tuple[bool, str]:
    if dry:
        count = last_line(out, r"^(\d+)(?:/\d+)? tests? collected")
        return rc == 0 and bool(count) and int(count) > 0, f"{count or 0} gpu tests collected (dry run: not run)"
    summary = last_line(out, r"^=*\s*(\d+ (?:passed|failed|skipped|error).*?)(?: in [\d.]+s.*)?=*$")
    unskippable = [line for line in out.splitlines() if line.startswith("SKIPPED")
                   and ("needs a CUDA device" in line or "TRITON_INTERPRET" in line)]
    if rc == 5:
        return False, "no gpu test collected"
    if unskippable:
        return False, f"{summary}; {len(unskippable)} skipped for want of CUDA or real kernels"
    return rc == 0 and "passed" in summary, summary or failure(rc, out)


def judge_opinfo(rc: int, out: str, dry: bool) -> tuple[bool, str]:
    ran = last_line(out, r"^ran (\d+ cases) in")
    verdict = last_line(out, r"^(\d+ unexpected failures, \d+ unexpected passes)$")
    return rc == 0 and bool(ran), ", ".join(x for x in (ran, verdict) if x) or failure(rc, out)


def judge_models(rc: int, out: str, dry: bool) -> tuple[bool, str]:
    summary = last_line(out, r"^models: (.*)$")
    cases = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                cases.append(json.loads(line))
            except ValueError:
                pass
    notes = [f"{n} with fallbacks" for n in [sum(bool(c.get("fallbacks")) for c in cases)] if n]
    notes += [f"{n} stand-ins from tests/models.py" for n in [sum("(" in c.get("source", "") for c in cases)] if n]
    return rc == 0 and bool(summary), "; ".join([summary or failure(rc, out), *notes])


def judge_bench(rc: int, out: str, dry: bool) -> tuple[bool, str]:
    summary = last_line(out, r"^bench: (.*)$")
    note = "; kernel time n/a (interpreter)" if dry else ""
    return rc == 0 and bool(summary), (summary or failure(rc, out)) + note


# ---------------------------------------------------------------------------------------------- the plan


SETUP = """
import importlib.metadata as md, os, sys
from pathlib import Path
root, dry, site = Path(sys.argv[1]), sys.argv[2] == "dry", Path(sys.argv[3])
import torch, triton, ember, ember_core
from ember._cli import main as ember_cli
problems = []
for name, module in [(n, n.replace("-", "_")) for n in sys.argv[4:]]:
    where = md.distribution(name).locate_file("")
    if Path(where).resolve() != site.resolve():
        problems.append(f"{name}'s metadata comes from {where}, not the checkout's {site}")
    mod = __import__(module)
    if root.resolve() not in Path(mod.__file__).resolve().parents:
        problems.append(f"{module} is imported from {mod.__file__}, not from {root}")
registry = ember_core.get_plugin_manager().registry
for codegen in ("cpp", "triton"):
    registry.find("codegen", codegen)
cuda = torch.cuda.is_available()
gpu = "no CUDA device"
if cuda:
    gpu = f"{torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})"
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"triton {triton.__version__}, {gpu}")
print(f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}, ember {ember.__version__} from {root}")
ember_cli(["plugins"])
for p in problems:
    print("problem:", p)
if not dry and not cuda:
    print("setup: no CUDA device: torch.cuda.is_available() is False; nothing on the GPU can run")
    sys.exit(1)
if problems:
    print(f"setup: ember is not imported from the checkout ({len(problems)} problems)")
    sys.exit(1)
print(f"setup: torch {torch.__version__}, triton {triton.__version__}, {gpu if cuda else 'CPU (dry run)'}")
"""


def gpu_test_files() -> list[Path]:
    """Every test file (packages/*/tests, tests/) that marks a test `gpu`. One pytest process runs them all: test
    file names repeat across the packages' folders, but not among these, nor their helper modules."""
    folders = [*sorted((ROOT / "packages").glob("*/tests")), ROOT / "tests"]
    return [f for folder in folders for f in sorted(folder.glob("test_*.py"))
            if GPU_MARK.search(f.read_text(errors="replace"))]


def opinfo_subset() -> list[str]:
    """The CI subset of OpInfos (tests/test_opinfo_subset.py's SUBSET), read without importing torch."""
    tree = ast.parse((ROOT / "tests" / "test_opinfo_subset.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SUBSET")


def has_module(name: str) -> bool:
    done = subprocess.run([sys.executable, "-c", f"import importlib.util, sys; "
                           f"sys.exit(importlib.util.find_spec({name!r}) is None)"], capture_output=True)
    return done.returncode == 0


def plan(dry: bool, site: Path, logs: Path) -> list[Step]:
    py = sys.executable
    names = [p.name for p in packages.load().values()]
    steps = [Step("setup", "setup", 90, [py, "-c", SETUP, str(ROOT), "dry" if dry else "real", str(site), *names],
                  judge_setup)]
    pytest = [py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs"]
    if dry:
        pytest.append("--collect-only")
    else:
        pytest += [*(["-n", "4"] if has_module("xdist") else []), "--durations=10"]
    steps.append(Step("gpu-tests", "tests", 90 if dry else 240, [*pytest, *map(str, gpu_test_files())], judge_pytest))
    opinfo = [py, "-m", "tests.opinfo", "run", "--samples", "1", "--timeout", "120", "--out", str(logs / "opinfo")]
    if dry:
        opinfo += ["--device", "cpu", "--dtype", "float32", "--ops", "add", "--jobs", "1"]
    else:
        opinfo += ["--device", "cuda", "--dtype", "float32,bfloat16", "--ops", ",".join(opinfo_subset()),
                   "--jobs", str(max(1, min(6, (os.cpu_count() or 2) // 3))), "--chunk", "6"]
    steps.append(Step("opinfo", "opinfo", 120 if dry else 270, opinfo, judge_opinfo))
    models = [py, str(ROOT / "tools" / "gpu_models.py"), "--device", *(["cpu", "--tiny"] if dry else ["cuda"])]
    steps.append(Step("models", "models", 150 if dry else 270, models, judge_models))
    bench = [py, str(ROOT / "benchmarks" / "gpu.py")]
    if dry:
        bench += ["--smoke", "--only", "pointwise chain", "--dtypes", "float32", "--repeats", "1",
                  "--variants", "eager,ember", "--no-overhead", "--timeout", "120"]
    else:
        bench += ["--only", BENCH_REAL, "--dtypes", "bfloat16", "--repeats", "3", "--timeout", "60"]
    steps.append(Step("bench", "bench", 150, bench, judge_bench, extends=True))  # 150 s kept, and what is left
    return steps


# ---------------------------------------------------------------------------------------------- running


class Runner:
    def __init__(self, steps: list[Step], env: dict[str, str], logs: Path, budget_s: float, dry: bool):
        self.steps, self.env, self.logs, self.dry = steps, env, logs, dry
        self.start = time.monotonic()
        self.deadline = self.start + budget_s
        self.outcomes: dict[str, Outcome] = {}
        self.lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, text: str) -> None:
        with self.lock:
            print(f"[{self.elapsed():5.0f} s] {text}", flush=True)

    def run_step(self, step: Step, deadline: float) -> Outcome:
        index = self.steps.index(step) + 1
        log = self.logs / f"{index:02d}-{step.name.replace(':', '-')}.log"
        limit = deadline - time.monotonic() if step.extends else min(step.budget_s, deadline - time.monotonic())
        if limit < 5:
            return Outcome(step, "not run", 0.0, f"out of time: the run's {self.deadline - self.start:.0f} s are spent",
                           None)
        self.say(f"{step.name}: started (limit {limit:.0f} s), log {log.relative_to(self.logs.parent)}")
        began = time.monotonic()
        with log.open("w") as sink:
            sink.write(f"$ {' '.join(step.argv)}\n\n")
            sink.flush()
            proc = subprocess.Popen(step.argv, cwd=ROOT, env={**self.env, **step.env}, stdout=sink,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the step's own process group: its workers and children
                rc, timed_out = proc.wait(), True
        seconds = time.monotonic() - began
        output = log.read_text(errors="replace")
        passed, result = step.judge(rc, output, self.dry)
        status = "TIMEOUT" if timed_out else ("pass" if passed else "FAIL")
        if timed_out:
            result = f"killed after {limit:.0f} s; {result}"
        self.say(f"{step.name}: {status} in {seconds:.0f} s: {result}")
        return Outcome(step, status, seconds, result, log)

    def run_lane(self, steps: list[Step], deadline: float) -> None:
        for step in steps:
            outcome = self.run_step(step, deadline)
            with self.lock:
                self.outcomes[step.name] = outcome

    def run(self) -> list[Outcome]:
        lanes: dict[str, list[Step]] = {}
        for step in self.steps:
            lanes.setdefault(step.lane, []).append(step)
        bench_s = sum(s.budget_s for s in lanes.get("bench", []))
        for step in lanes.pop("setup", []):
            self.outcomes[step.name] = self.run_step(step, self.deadline)
        if any(o.status != "pass" for o in self.outcomes.values()):
            why = "not run: setup failed"
            for step in self.steps:
                self.outcomes.setdefault(step.name, Outcome(step, "missing", 0.0, why, None))
            return [self.outcomes[s.name] for s in self.steps]
        last = lanes.pop("bench", [])
        threads = [threading.Thread(target=self.run_lane, args=(steps, self.deadline - bench_s))
                   for steps in lanes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.run_lane(last, self.deadline)
        return [self.outcomes[s.name] for s in self.steps]


def table(outcomes: list[Outcome], logs: Path, header: str) -> str:
    rows = [header, "", "| step | status | seconds | result | log |", "|---|---|---:|---|---|"]
    for o in outcomes:
        log = o.log.relative_to(logs.parent) if o.log else ""
        rows.append(f"| {o.step.name} | {o.status} | {o.seconds:.0f} | {o.result.replace('|', '/')} | {log} |")
    return "\n".join(rows)


def clear_logs(logs: Path) -> str:
    """Make `logs` ready: a new or empty folder, or one an earlier run wrote (its summary.md), whose files of ours
    are removed; anything else is refused (an error message), never emptied."""
    if logs.exists() and any(logs.iterdir()):
        if not (logs / "summary.md").exists():
            return f"{logs} is not empty and holds no summary.md of an earlier run: name a new or empty folder"
        for path in logs.iterdir():
            if re.fullmatch(r"\d\d-[\w.-]+\.log|summary\.md", path.name):
                path.unlink()
        shutil.rmtree(logs / "opinfo", ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    return ""


def step_env(dry: bool, site: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    shims = [] if has_module("expecttest") else [str(ROOT / "tools" / "shims")]  # torch's OpInfos import it
    env["PYTHONPATH"] = os.pathsep.join(x for x in (packages.source_pythonpath(site), env.get("PYTHONPATH"), *shims)
                                        if x)
    env.update(TRITON_INTERPRET="1" if dry else "0", EMBER_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1")
    if dry:
        env["EMBER_OPTIONS"] = json.dumps({"codegen.cpu": "triton"})
    else:
        env.pop("EMBER_OPTIONS", None)  # the defaults, as a user gets them
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="the same steps on the CPU, in Triton's interpreter")
    parser.add_argument("--logs", type=Path, default=ROOT / "gpu-logs", help="folder of the logs (default gpu-logs)")
    parser.add_argument("--only", default="", help="steps to run (setup always runs), comma-separated")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole run (default 480)")
    parser.add_argument("--list", action="store_true", help="print the steps' commands and exit")
    args = parser.parse_args(argv)
    logs = args.logs.resolve()
    work = Path(tempfile.mkdtemp(prefix="ember-gpu-check-"))
    try:
        site = work / "site"
        steps = plan(args.dry_run, site, logs)
        only = {s.strip() for s in args.only.split(",") if s.strip()}
        steps = [s for s in steps if s.name == "setup" or not only or s.name in only]
        if args.list:
            for s in steps:
                shown = " ".join("<script>" if "\n" in a else a for a in s.argv)
                print(f"{s.name} [lane {s.lane}, at most {s.budget_s:.0f} s]: {shown}")
            return 0
        problem = clear_logs(logs)
        if problem:
            print(f"./dev gpu: {problem}", file=sys.stderr)
            return 2
        env = step_env(args.dry_run, site, work / "cache")
        mode = "dry run: CPU, Triton's interpreter, tiny sizes" if args.dry_run else "real kernels (TRITON_INTERPRET=0)"
        print(f"./dev gpu: {mode}; {len(steps)} steps, {args.budget:.0f} s at most; logs in {logs}", flush=True)
        runner = Runner(steps, env, logs, args.budget, args.dry_run)
        outcomes = runner.run()
        setup = logs / "01-setup.log"
        found = re.search(r"^setup: (.*)$", setup.read_text(), re.M) if setup.exists() else None
        machine = f"{found.group(1)}; " if found else ""
        header = f"`./dev gpu{' --dry-run' if args.dry_run else ''}` ({mode}): {machine}{runner.elapsed():.0f} s " \
                 f"of {args.budget:.0f}"
        text = table(outcomes, logs, header)
        (logs / "summary.md").write_text(text + "\n")
        print("\n" + text, flush=True)
        failed = [o.step.name for o in outcomes if o.status != "pass"]
        if failed:
            print(f"\n./dev gpu: FAILED: {', '.join(failed)} (logs in {logs})", file=sys.stderr)
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
