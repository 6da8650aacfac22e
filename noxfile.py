"""ember's sessions. Each package's tests run in a venv holding only that package and what it declares.

`./dev` runs nox with uv next to it: every session's venv is made by uv and its packages are hard links into uv's
one cache, so ten sessions hold one torch on disk (without uv, nox falls back to venv and pip, a torch per venv).
The sessions use the Python that runs nox (3.10 or newer; `EMBER_PYTHON=3.12 ./dev test` picks another).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nox

nox.options.default_venv_backend = "uv|venv"
nox.options.download_python = "never"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "integration", "lowest", "lint"]
# A session whose Python is missing fails instead of being skipped (a skipped session counts as a success in nox's
# exit code: `EMBER_PYTHON=3.12 nox` on a machine without 3.12 ran nothing and exited 0). ./dev also fails a run
# in which any session was skipped (tools/nox_run.py).
nox.options.error_on_missing_interpreters = True
# A reused venv made by another Python is made again (nox reuses a session's venv by name alone: with EMBER_PYTHON=3.12
# the tests ran in the 3.11 venv of an earlier run).
os.environ.setdefault("NOX_ENABLE_STALENESS_CHECK", "1")

# The sessions' venvs are ember's own: their Pythons write bytecode there even where the caller set
# PYTHONDONTWRITEBYTECODE (as this project's machines do). Without it every process of a session (each xdist
# worker, each test that starts `ember` or Python) compiled torch's modules from source again: 7 s per
# `import torch` instead of 2.5.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

PYTHON = os.environ.get("EMBER_PYTHON", "").removeprefix("python") or f"{sys.version_info[0]}.{sys.version_info[1]}"
if sys.version_info < (3, 10):  # noqa: UP036 - nox itself may run on an older Python
    raise SystemExit(f"ember needs Python 3.10 or newer; nox runs on {sys.version.split()[0]}")


def _pip_settings_for_uv() -> None:
    """uv reads no pip.conf: give it pip's package sources (extra indexes, local wheels, constraints) as its own
    variables, so a session installs what pip would on this machine (here: torch's CPU wheel from local disk).
    A variable the user set wins."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return
    names = {"index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL", "find-links": "UV_FIND_LINKS",
             "constraint": "UV_CONSTRAINT"}
    for line in out.splitlines():  # `global.extra-index-url='a b'`, `:env:.find-links='/opt/wheels'`
        m = re.fullmatch(r"[^.]*\.([a-z-]+)='(.*)'", line.strip())
        if m and m.group(1) in names:
            os.environ.setdefault(names[m.group(1)], m.group(2))
    if "UV_EXTRA_INDEX_URL" in os.environ:  # pip takes the best version over all indexes; uv the first index's
        os.environ.setdefault("UV_INDEX_STRATEGY", "unsafe-best-match")
    os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


_pip_settings_for_uv()

TORCH_DEFAULT = "2.13.0"
# The release matrix: EMBER_TORCH=2.13.0,2.14.1 nox -s integration
TORCH_VERSIONS = os.environ.get("EMBER_TORCH", TORCH_DEFAULT).split(",")
# The lowest torch the packages declare (`torch>=2.11`; tests/test_torch_range.py keeps the two equal), and the
# GPU machines' torch. From the package index as a CUDA build (several GB, once in uv's cache).
TORCH_LOWEST = "2.11.0"
# What runs on it (`lowest`): both frontends, training, dynamic shapes, compiled autograd, autocast, devices, the CLI,
# gradients left None (its Dynamo once failed tracing the backward that decides them, under compiled autograd), and
# the semantics against eager (its make_fx raised on a generator argument where 2.13's did not).
LOWEST_TESTS = ["tests/test_models.py", "tests/test_training.py", "tests/test_dynamic_shapes.py",
                "tests/test_compiled_autograd.py", "tests/test_autocast.py", "tests/test_devices.py",
                "tests/test_cli.py", "tests/test_trace_threads.py", "tests/test_unreached_grads.py",
                "tests/test_semantics.py", "tests/test_op_classes.py", "tests/test_rnn.py", "tests/test_guards.py",
                "tests/test_plugins.py"]
# oneDNN's matmul with the operand layouts codegen-cpp gives it, on the lowest torch's oneDNN
LOWEST_CPP_TESTS = ["packages/codegen-cpp/tests/test_gemm.py"]

LOWEST_TRITON_TESTS = ["packages/codegen-triton/tests/test_launcher.py",
                       "packages/codegen-triton/tests/test_gpu_compile.py"]

# package folder → the sibling folders it depends on (its pyproject's ember-* dependencies)
PACKAGES = {
    "core": [],
    "capture": ["core"],
    "autograd": ["core"],
    "partition": ["core"],
    "lowering": ["core"],
    "codegen-cpp": ["core", "lowering"],
    "codegen-triton": ["core", "lowering"],
    "runtime": ["core"],
    "ember": ["core", "capture", "autograd", "partition", "lowering", "codegen-cpp", "codegen-triton", "runtime"],
}
# the optional parts a package's own tests cover, and the integration suite: ember-core's HTML report (networkx)
# and its remote cache's Redis client (the integration suite runs it against a real redis-server: `.ci/run`)
EXTRAS = {"core": "[report,redis]"}
EXAMPLES = ["examples/ember-fold-mul-one"]
# The fuzz tests of every loader: graph JSON, graph text, constants (inline and side files), cache sidecars and
# entries, packed (remote, artifact) cache entries, loop-IR text, DOT diagrams, and the `ember` command itself (one
# pytest run each: test file names repeat across packages).
FUZZ_TESTS = ["packages/core/tests/test_fuzz_graph_json.py", "packages/core/tests/test_fuzz_graph_text.py",
              "packages/core/tests/test_fuzz_constants.py", "packages/core/tests/test_disk_cache.py",
              "packages/core/tests/test_remote_cache.py",
              "tests/test_fuzz_cache_entries.py", "packages/lowering/tests/test_fuzz_plan_text.py",
              "packages/ember/tests/test_fuzz_dot.py", "packages/ember/tests/test_fuzz_cli.py"]
# expecttest: torch's OpInfo table (torch.testing._internal) imports it; tests/opinfo and its CI subset need the table.
TEST_TOOLS = ["pytest>=8", "pytest-xdist>=3.2", "jsonschema>=4", "numpy", "hypothesis>=6", "expecttest"]
# pytest-xdist: each suite runs in this many worker processes (EMBER_TEST_WORKERS, default one per core up to 4).
# On CI's 2 cores the run is single-threaded Python and g++ almost throughout; two workers take it from 44 to under
# 30 minutes. Each worker has its own disk cache (tests/conftest.py), so no build is shared between them.
TEST_WORKERS = os.environ.get("EMBER_TEST_WORKERS") or str(min(os.cpu_count() or 1, 4))
OPINFO_SHARDS = 8


def install_siblings(session: nox.Session, folders: list[str], torch: str = TORCH_DEFAULT) -> None:
    """One pip call for torch and every sibling, so an inconsistent version pin fails loudly."""
    session.install(f"torch=={torch}", *TEST_TOOLS, *folders)


def pytest(session: nox.Session, *paths: str, parallel: bool = True) -> None:
    workers = ["-n", TEST_WORKERS, "--dist", "worksteal"] if parallel and TEST_WORKERS != "1" else []
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, *paths, *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """A package's unit tests, with only it and its declared dependencies installed."""
    folders = [f"packages/{p}" for p in PACKAGES[package]] + [f"packages/{package}{EXTRAS.get(package, '')}"]
    install_siblings(session, folders)
    pytest(session, f"packages/{package}/tests")


@nox.session(python=PYTHON)
@nox.parametrize("torch", TORCH_VERSIONS)
def integration(session: nox.Session, torch: str) -> None:
    """The cross-package suite with every package and the example plugin installed."""
    install_siblings(session, [*(f"packages/{p}{EXTRAS.get(p, '')}" for p in PACKAGES), *EXAMPLES], torch)
    pytest(session, "tests", "--durations=20")  # the slowest tests, for keeping CI inside its time
    # The foundation suite again with the other partitioner (test_training.py covers both by itself).
    session.env["EMBER_OPTIONS"] = '{"partition": "default"}'
    pytest(session, "tests/test_models.py", "tests/test_semantics.py")
    # The models and training steps through the Triton codegen, its kernels in Triton's CPU interpreter.
    session.env.update(TRITON_INTERPRET="1", EMBER_OPTIONS='{"codegen.cpu": "triton"}')
    pytest(session, "tests/test_models.py", "tests/test_training.py", "tests/test_devices.py")


@nox.session(python=PYTHON)
def lowest(session: nox.Session) -> None:
    """A fast subset of the integration suite on the lowest torch the packages declare."""
    install_siblings(session, [*(f"packages/{p}" for p in PACKAGES), *EXAMPLES], TORCH_LOWEST)
    pytest(session, *LOWEST_TESTS)
    pytest(session, *LOWEST_CPP_TESTS)  # apart: each test folder's conftest is a module named conftest
    # torch 2.11's CUDA build brings Triton 3.6, the GPU machines' Triton: the lean launchers against its
    # specialization rules and its own launch path (a stand-in sm_90 driver; no GPU needed).
    pytest(session, *LOWEST_TRITON_TESTS)


@nox.session(python=PYTHON)
def gpu(session: nox.Session) -> None:
    """On a machine with CUDA: the `gpu`-marked tests, the Triton codegen's (its conformance kit and kernels on CUDA)
    and the integration suite's (real models forward and backward on CUDA through the default codegen)."""
    install_siblings(session, [f"packages/{p}" for p in PACKAGES])
    session.env["TRITON_INTERPRET"] = "0"
    if session.run("python", "-c", "import torch; print(torch.cuda.is_available())", silent=True).strip() != "True":
        session.error("no CUDA device: every gpu test would be skipped (`./dev gpu --dry-run` checks the runner on "
                      "the CPU)")
    pytest(session, "-m", "gpu", "packages/codegen-triton/tests")
    pytest(session, "-m", "gpu", "tests")


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """The fuzz tests of every loader (graph JSON and text, constants, loop-IR text, caches, DOT) and of the
    `ember` command with many more cases than CI runs, on a fresh seed each time: `EMBER_FUZZ_EXAMPLES=100000 nox -s
    fuzz` for a long run. The command's cases that start a process (a second or two each) are counted apart:
    `EMBER_FUZZ_CLI_EXAMPLES`. Each test file prints its tally: accepted, refused, code runs, crashes, hangs and
    wrongly accepted files (any of the last four fails the run)."""
    install_siblings(session, [f"packages/{p}" for p in PACKAGES])
    session.env.setdefault("EMBER_FUZZ_EXAMPLES", "5000")
    session.env.setdefault("EMBER_FUZZ_CLI_EXAMPLES", "100")
    session.env.setdefault("EMBER_FUZZ_SEED", "random")
    for path in FUZZ_TESTS:
        pytest(session, "-k", "fuzz", path, parallel=False)  # one process: each file prints its tally


@nox.session(python=PYTHON)
def training_fuzz(session: nox.Session) -> None:
    """Random small training programs, ember against eager, both against float64 (tests/training_fuzz): 200 seeds in
    each setting (Dynamo, the trace frontend, dynamic shapes, autocast, a bfloat16 model, no_grad, three SGD steps,
    the backward captured by compiled autograd, a float argument that changes every step, int arguments at the edges
    of their ranges, static and dynamic), about 10 minutes each on two cores. Arguments
    go to `python -m tests.training_fuzz run` instead: `nox -s training_fuzz -- --seeds 1000:2000 --dynamic`. Fails
    when a program's compiled loss, output or gradients break the accuracy contract or do not compile."""
    install_siblings(session, [f"packages/{p}" for p in PACKAGES])
    run = ["python", "-m", "tests.training_fuzz", "run"]
    if session.posargs:
        session.run(*run, *session.posargs)
        return
    settings = ([], ["--frontend", "trace"], ["--dynamic"], ["--autocast"], ["--dtype", "bfloat16"], ["--inference"],
                ["--steps", "3"], ["--compiled-autograd"], ["--floats"], ["--edges"], ["--edges", "--dynamic"])
    for setting in settings:
        session.run(*run, "--seeds", "0:200", *setting)


@nox.session(python=PYTHON)
def opinfo(session: nox.Session) -> None:
    """ember against eager on every OpInfo of torch's op_db (3 samples each, CPU, forward and backward; tests/opinfo),
    shard after shard, each in worker processes: `nox -s opinfo -- --shard 0/8` runs one shard, `-- --dtype bfloat16`
    the other dtype, `-- --ops sin,cat` a few ops. Writes opinfo-results/SUMMARY-ember.md over every result file there
    and fails on a case the expected-failures list does not foresee (tests/opinfo/expected_failures.txt, each line with
    its reason), a case whose graph did not build or lower (the interpreter codegen ran it) included."""
    install_siblings(session, [f"packages/{p}" for p in PACKAGES])
    run = ["python", "-m", "tests.opinfo", "run", "--jobs", "2"]
    if any(a == "--shard" or a.startswith("--shard=") for a in session.posargs):
        session.run(*run, *session.posargs)
        return
    for k in range(OPINFO_SHARDS):  # every shard, then one verdict over all of them
        session.run(*run, "--shard", f"{k}/{OPINFO_SHARDS}", *session.posargs, success_codes=[0, 1])
    compiler = [a for i, a in enumerate(session.posargs) if i and session.posargs[i - 1] == "--compiler"]
    session.run("python", "-m", "tests.opinfo", "report", *(["--compiler", *compiler[-1:]] if compiler else []))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "packages", "tests", "benchmarks", "examples", "tools", "noxfile.py")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """Compile a small model with ember, check it against eager, and show what each stage saw."""
    install_siblings(session, [f"packages/{p}" for p in PACKAGES])
    session.run("python", "examples/demo.py")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks (never part of pass/fail): ratios against eager and torch.compile, side by side."""
    install_siblings(session, [f"packages/{p}" for p in PACKAGES])
    session.install("-r", "benchmarks/requirements.txt")
    for script in session.posargs or ["benchmarks/overhead.py"]:
        session.run("python", script)
