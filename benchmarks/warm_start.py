"""Warm start: how long a fresh process compiles a model on an empty cache (cold) and with what an earlier process
left (warm), ember and Inductor side by side, in four ways of being warm.

Every measurement is one fresh child process. It points ember's `EMBER_CACHE_DIR` and Inductor's
`TORCHINDUCTOR_CACHE_DIR` into the folder it is given (before torch is imported), compiles a tiny model with the
same compiler in the same mode (so that imports and one-time start-up are not counted), collects garbage (the
first full collection of the objects start-up made would otherwise land inside the timed call in some children
and not in others: a gen-2 collection takes 0.15 s here), then calls the workload once and a few times more:
compile time = the first call minus the median of the steady calls.

For ember (default frontend) and Inductor, each repeat is one cold child and up to three warm ones after it, all
with the remote cache on (ember: `EMBER_REMOTE_CACHE` and the team key `EMBER_CACHE_KEY`, so that its C++
libraries travel too; Inductor: `TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1`, `TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1`,
`TORCHINDUCTOR_REDIS_HOST/PORT`) against one `redis-server` the parent starts, emptied before every child but the
remote warm one. The same settings everywhere: Inductor's AOTAutograd cache key holds functorch's config, the
remote cache's switch included, so a process with it off misses every entry one with it on wrote.

- cold: a fresh folder and an empty Redis, which it fills. After its measurement it writes an artifact of what the
  workload compiled (ember: `ember.cache.save(path, entries)` of a `recording()` block; Inductor:
  `torch.compiler.save_cache_artifacts()`, the Mega-cache, of what was recorded after start-up).
- remote warm: a fresh, empty folder and the Redis the cold child filled.
- local warm: the cold child's folder (ember: its partitions, kernel plans and built libraries; Inductor: its FX
  graph and AOTAutograd caches, on by default, and its built C++ kernels); Redis empty.
- artifact warm: a fresh, empty folder, Redis empty; after start-up, before the workload, the child loads the
  artifact (ember: `ember.cache.load(path)`, which must skip nothing; Inductor:
  `torch.compiler.load_cache_artifacts(bytes)`, reading the file included). Its load time is reported on its own
  and included in the column's warm time.

The remote and artifact columns run on the workloads marked `shared` (one training, one inference at least), or on
all with `--all-columns`.

Every child checks that it was what its column says, and fails (so does the run) otherwise. ember: the workload's
`disk_cache_*` and `build_cache_*` events (`ember_core.record_events`): cold has misses and no hit from Redis; a
warm child has hits and no miss, remote warm at least one hit from Redis, the others none. Inductor: the
`fxgraph_cache_*` and `autograd_cache_*` counters: cold has misses, a warm child hits and no miss or bypass. The
children also count the C++ libraries (ember: `build_cache_miss`; Inductor: new `.so` files in its folder) that the
workload built, which the parent prints after the table.

"ember (trace frontend)" is ember with its own `trace` frontend, cold and local warm only, no remote cache. "Dynamo
alone" is `torch.compile(backend="eager")`: Dynamo's tracing and guards with no compiler behind it, the part of a
warm compile no cache removes (cold only: it keeps no cache). Rows are medians over `--repeats`.

Usage: python benchmarks/warm_start.py [--repeats 3] [--only NAME,...] [--all-columns] [--write]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

if "--child" in sys.argv:  # the caches live where the parent says: set before torch and ember read them
    _FOLDER = sys.argv[sys.argv.index("--child") + 3]
    os.environ["EMBER_CACHE_DIR"] = os.path.join(_FOLDER, "ember")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_FOLDER, "inductor")

import torch  # noqa: E402
from _harness import write_section  # noqa: E402
from models import Block, GeluMLP, SmallCNN, mlp_train_step_model  # noqa: E402
from torch import nn  # noqa: E402


@dataclass
class Workload:
    name: str
    make: Callable[[], tuple[nn.Module, torch.Tensor]]
    training: bool
    shared: bool = False  # also the remote and artifact columns (all workloads with --all-columns: 22 min, not 16)


WORKLOADS = [
    Workload("mlp train step 256x512", lambda: (mlp_train_step_model(), torch.randn(256, 512)), True),
    Workload("transformer block train step 8x128x256", lambda: (Block(), torch.randn(8, 128, 256)), True, True),
    Workload("gelu mlp 256x512", lambda: (GeluMLP(), torch.randn(256, 512)), False),
    Workload("transformer block 8x128x256", lambda: (Block().eval(), torch.randn(8, 128, 256)), False, True),
    Workload("small cnn 16x3x32x32", lambda: (SmallCNN().eval(), torch.randn(16, 3, 32, 32)), False),
]
# ember with its default frontend (Dynamo) and with its own `trace` frontend; Inductor; Dynamo with no compiler
COMPILERS = ("ember", "ember-trace", "inductor", "dynamo")
# the kinds of child each compiler gets, in order (the remote warm one right after the cold one that fills Redis)
ROLES = {"ember": ("cold", "remote", "local", "artifact"), "ember-trace": ("cold", "local"),
         "inductor": ("cold", "remote", "local", "artifact"), "dynamo": ("cold",)}
SHARED_ROLES = ("remote", "artifact")  # only on workloads marked `shared`, unless --all-columns
USES_REDIS = ("ember", "inductor")  # run every child with the remote cache on (cold ones fill an emptied Redis)
TEAM_KEY = "benchmark-team-key-0123456789"  # ember's EMBER_CACHE_KEY in the children that use Redis (≥ 16 bytes)


# ---------------------------------------------------------------------------------------------- one child process


def compiler(name: str) -> Callable[[nn.Module], Callable]:
    import ember  # in every child, so that all start from the same modules imported

    if name == "ember":
        return ember.compile
    if name == "ember-trace":
        return lambda model: ember.compile(model, options={"frontend": "trace"})
    backend = {"inductor": "inductor", "dynamo": "eager"}[name]
    return lambda model: torch.compile(model, backend=backend)


def step(fn: Callable, training: bool) -> Callable[[torch.Tensor], None]:
    if training:
        return lambda x: fn(x).pow(2).mean().backward()

    def infer(x: torch.Tensor) -> None:
        with torch.no_grad():
            fn(x)

    return infer


def seconds(fn: Callable, x: torch.Tensor) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


class WrongKind(AssertionError):
    """A child that was not what its column says (a warm one that compiled, a cold one that hit): its time would lie."""


@dataclass
class CacheCheck:
    """What a child's workload found in the caches, and the check that it is what the child's role says."""

    compiler: str
    role: str
    counts: dict[str, int] = field(default_factory=dict)

    def verify(self) -> None:
        c = self.counts
        if self.compiler.startswith("ember"):
            misses, hits, remote = c["disk_miss"] + c["build_miss"], c["disk_hit"] + c["build_hit"], c["remote_hits"]
        elif self.compiler == "inductor":
            misses, hits, remote = c["fxgraph_miss"] + c["autograd_miss"], c["fxgraph_hit"] + c["autograd_hit"], 0
            if c["fxgraph_bypass"] + c["autograd_bypass"]:
                raise WrongKind(f"inductor {self.role}: a cache was bypassed: {c}")
        else:
            return
        if self.role == "cold":
            if not misses or remote:
                raise WrongKind(f"{self.compiler} cold was not cold (every compile must miss, none hit Redis): {c}")
            return
        if misses or not hits:
            raise WrongKind(f"{self.compiler} {self.role} warm was not warm (it must hit and never miss): {c}")
        if self.compiler.startswith("ember") and (self.role == "remote") != bool(remote):
            raise WrongKind(f"{self.compiler} {self.role} warm: {remote} hits from Redis: {c}")


@contextlib.contextmanager
def cache_check(compiler_name: str, role: str) -> Iterator[CacheCheck]:
    """Counts the cache events (ember) or counters (Inductor) of the block."""
    check = CacheCheck(compiler_name, role)
    so_before = set(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).rglob("*.so"))
    if compiler_name.startswith("ember"):
        from ember_core import record_events

        with record_events() as recorder:
            yield check
        events = recorder.events
        for name, kind in (("disk_hit", "disk_cache_hit"), ("disk_miss", "disk_cache_miss"),
                           ("build_hit", "build_cache_hit"), ("build_miss", "build_cache_miss")):
            check.counts[name] = sum(e.kind == kind for e in events)
        check.counts["remote_hits"] = sum(e.kind in ("disk_cache_hit", "build_cache_hit")
                                          and (e.data or {}).get("origin", "local") != "local" for e in events)
        check.counts["libraries_built"] = check.counts["build_miss"]
        return
    from torch._dynamo.utils import counters

    counters.clear()
    yield check
    for name, (group, key) in {"fxgraph_hit": ("inductor", "fxgraph_cache_hit"),
                               "fxgraph_miss": ("inductor", "fxgraph_cache_miss"),
                               "fxgraph_bypass": ("inductor", "fxgraph_cache_bypass"),
                               "autograd_hit": ("aot_autograd", "autograd_cache_hit"),
                               "autograd_miss": ("aot_autograd", "autograd_cache_miss"),
                               "autograd_bypass": ("aot_autograd", "autograd_cache_bypass")}.items():
        check.counts[name] = counters[group][key]
    check.counts["libraries_built"] = len(set(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).rglob("*.so")) - so_before)


def load_artifact(compiler_name: str, path: str) -> float:
    """Load the artifact the cold child wrote into this child's (empty) caches; seconds, reading the file included."""
    start = time.perf_counter()
    if compiler_name == "ember":
        import ember

        report = ember.cache.load(path)
        elapsed = time.perf_counter() - start
        if report.skipped or not report.entries:
            raise WrongKind(f"ember.cache.load({path}) loaded {len(report.entries)} entries, skipped "
                            f"{report.skipped}")
        return elapsed
    info = torch.compiler.load_cache_artifacts(Path(path).read_bytes())
    elapsed = time.perf_counter() - start
    if info is None or not (info.inductor_artifacts or info.aot_autograd_artifacts):
        raise WrongKind(f"torch.compiler.load_cache_artifacts({path}) loaded nothing: {info}")
    return elapsed


def measure(compiler_name: str, workload_name: str, role: str, artifact: str) -> dict:
    """First call, steady call and their difference (the compile time), seconds; the artifact's load time; what
    the workload found in the caches."""
    w = next(w for w in WORKLOADS if w.name == workload_name)
    compile_ = compiler(compiler_name)
    tiny = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    step(compile_(tiny), w.training)(torch.randn(4, 8))  # start-up: imports, workers, first-use set-up
    load = load_artifact(compiler_name, artifact) if role == "artifact" else 0.0
    saving = role == "cold" and artifact != "-"
    recording = contextlib.nullcontext([])
    if saving and compiler_name == "ember":  # the artifacts hold the workload's entries only, not start-up's
        import ember

        recording = ember.cache.recording()
    elif saving:
        from torch.compiler._cache import CacheArtifactManager

        CacheArtifactManager.clear()
    torch.manual_seed(0)
    model, x = w.make()
    with cache_check(compiler_name, role) as check, recording as entries:
        run = step(compile_(model), w.training)
        gc.collect()  # a full collection now, not one that start-up's objects would bring on inside the timed call
        first = seconds(run, x)
        run(x)
        steady = statistics.median(seconds(run, x) for _ in range(5))
    check.verify()
    if saving:
        if compiler_name == "ember":
            import ember

            report = ember.cache.save(artifact, entries)
            if report.skipped or not report.entries:
                raise WrongKind(f"ember.cache.save wrote {len(report.entries)} entries, skipped {report.skipped}")
        else:
            saved = torch.compiler.save_cache_artifacts()
            if saved is None:
                raise WrongKind("torch.compiler.save_cache_artifacts() saved nothing")
            Path(artifact).write_bytes(saved[0])
    return {"first": first, "steady": steady, "compile": first - steady, "load": load, "counts": check.counts}


# ---------------------------------------------------------------------------------------------- the parent


class Redis:
    """One `redis-server` on 127.0.0.1 for the whole run, no persistence; flushed before each cold child."""

    def __init__(self) -> None:
        import redis

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder = tempfile.mkdtemp(prefix="ember-warm-start-redis-")
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", self.folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.05)

    def env(self) -> dict[str, str]:
        """What a child that uses the remote caches adds to its environment."""
        return {"EMBER_REMOTE_CACHE": f"redis://127.0.0.1:{self.port}/0", "EMBER_CACHE_KEY": TEAM_KEY,
                "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
                "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1", "TORCHINDUCTOR_REDIS_PORT": str(self.port)}

    def flush(self) -> None:
        self.client.flushall()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


REMOTE_VARIABLES = ("EMBER_REMOTE_CACHE", "EMBER_CACHE_KEY", "EMBER_CACHE_KEY_FILE",
                    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
                    "TORCHINDUCTOR_REDIS_HOST", "TORCHINDUCTOR_REDIS_PORT", "TORCHINDUCTOR_REDIS_URL")


def run_child(compiler_name: str, workload: str, folder: str, role: str, artifact: str,
              remote: dict[str, str] | None) -> dict:
    cmd = [sys.executable, __file__, "--child", compiler_name, workload, folder, role, artifact]
    env = {k: v for k, v in os.environ.items() if k not in REMOTE_VARIABLES} | (remote or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{compiler_name} {role} on {workload!r} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def one_repeat(compiler_name: str, workload: str, redis: Redis, shared: bool) -> dict[str, dict]:
    """A cold child and the warm children after it: role → the child's result."""
    root = tempfile.mkdtemp(prefix="ember-warm-start-")
    roles = [r for r in ROLES[compiler_name] if shared or r not in SHARED_ROLES]
    uses_redis = compiler_name in USES_REDIS
    artifact = os.path.join(root, "artifact.bin") if "artifact" in roles else "-"
    # All of a compiler's children run with the same settings: Inductor's AOTAutograd cache keys hold functorch's
    # config, `enable_remote_autograd_cache` included, so a process with the remote cache off misses every entry
    # of one with it on. Redis is emptied before each child but the remote warm one, so that their hits are local.
    env = redis.env() if uses_redis else None
    try:
        cold_folder = os.path.join(root, "cold")
        results = {}
        for role in roles:
            if uses_redis and role != "remote":
                redis.flush()
            folder = cold_folder if role in ("cold", "local") else os.path.join(root, role)
            results[role] = run_child(compiler_name, workload, folder, role, artifact, env)
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Row:
    workload: Workload
    results: dict[str, list[dict[str, dict]]]  # compiler → per repeat, role → the child's result

    def median(self, compiler_name: str, role: str, what: str = "total") -> float:
        def value(r: dict) -> float:
            return r["compile"] + r["load"] if what == "total" else r[what]

        return statistics.median(value(rep[role]) for rep in self.results[compiler_name])

    def has(self, compiler_name: str, role: str) -> bool:
        return role in self.results[compiler_name][0]

    def warm(self, compiler_name: str, role: str) -> str:
        if not self.has(compiler_name, role):
            return "–"
        warm = self.median(compiler_name, role)
        return f"{warm:.2f} ({warm / self.median(compiler_name, 'cold'):.2f}x)"

    def four(self, compiler_name: str) -> str:
        return " | ".join([f"{self.median(compiler_name, 'cold'):.2f}", self.warm(compiler_name, "local"),
                           self.warm(compiler_name, "remote"), self.warm(compiler_name, "artifact"),
                           f"{self.median(compiler_name, 'artifact', 'load'):.2f}"
                           if self.has(compiler_name, "artifact") else "–"])

    def line(self) -> str:
        kind = "training" if self.workload.training else "inference"
        versus = self.median("ember", "local") / self.median("inductor", "local")
        return (f"| {self.workload.name} | {kind} | {self.four('ember')} | {self.median('ember-trace', 'cold'):.2f} | "
                f"{self.warm('ember-trace', 'local')} | {self.four('inductor')} | {versus:.2f} | "
                f"{self.median('dynamo', 'cold'):.2f} |")

    def built(self) -> str:
        """The libraries each warm column's workload built (median over repeats), for the notes after the table."""
        parts = []
        for c in ("ember", "inductor"):
            got = {role: statistics.median(rep[role]["counts"]["libraries_built"] for rep in self.results[c])
                   for role in ROLES[c] if self.has(c, role)}
            parts.append(f"{c} " + ", ".join(f"{role} {n:g}" for role, n in got.items()))
        return f"- {self.workload.name}: " + "; ".join(parts)


HEADER = ["| workload | kind | ember cold s | local warm s | remote warm s | artifact warm s | of which load s | "
          "ember (trace frontend) cold s | local warm s | Inductor cold s | local warm s | remote warm s | "
          "Mega-cache warm s | of which load s | local warm: ember / Inductor | Dynamo alone s |",
          "|---|---|" + "---:|" * 14]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="cold+warm sets of processes per compiler")
    parser.add_argument("--only", default="", help="workloads whose name contains one of these (comma-separated)")
    parser.add_argument("--all-columns", action="store_true",
                        help="the remote and artifact columns on every workload, not only the marked ones")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="replace the Warm start section of benchmarks/README.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child[:2], *args.child[3:])))
        return
    import ember

    chosen = [w for w in WORKLOADS if not args.only or any(o in w.name for o in args.only.split(","))]
    rows = []
    started = time.monotonic()
    redis = Redis()
    try:
        for w in chosen:
            began = time.monotonic()
            results: dict[str, list] = {c: [] for c in COMPILERS}
            for _ in range(args.repeats):  # the compilers take turns, so that a slow spell of the machine hits all
                for c in COMPILERS:
                    results[c].append(one_repeat(c, w.name, redis, w.shared or args.all_columns))
            rows.append(Row(w, results))
            print(rows[-1].line(), f"({time.monotonic() - began:.0f} s)", flush=True)
    finally:
        redis.stop()
    shared = ", ".join(w.name for w in chosen if w.shared or args.all_columns)
    text = "\n".join([
        f"`python benchmarks/warm_start.py --repeats {args.repeats}{' --all-columns' if args.all_columns else ''}` "
        f"({os.cpu_count()} cores, torch {torch.__version__}, ember {ember.__version__}, a local redis-server): "
        "compile time of a fresh process (its first call minus a steady call), median over "
        f"{args.repeats} repeats. Cold: empty caches. Local warm: the cache folder the cold process left. Remote "
        "warm: an empty cache folder and the Redis the cold process filled (ember: `EMBER_REMOTE_CACHE` with "
        "`EMBER_CACHE_KEY`; Inductor: `TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1`, "
        "`TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1`). Artifact warm: an empty cache folder, after loading what the cold "
        "process compiled (ember: `ember.cache.load` of its `ember.cache.save`; Inductor's Mega-cache: "
        "`torch.compiler.load_cache_artifacts` of its `save_cache_artifacts`): the load time is its own column and "
        "is included in the warm time. (x): warm / cold. Every ember and Inductor process runs with the remote "
        "cache on (Inductor's AOTAutograd cache key holds the remote switch: a process with it off misses every "
        "entry one with it on wrote), against a Redis emptied before each process but the remote warm one. Remote "
        f"and artifact columns on {shared or 'no workload'} only (`--all-columns`: every workload; 22 min instead "
        "of 16). ember uses its default frontend (Dynamo) unless the column says `trace` (no remote cache there); "
        "\"Dynamo alone\" is torch.compile with backend=\"eager\" (cold only: it keeps no cache). Each process checks "
        "its column and the run fails otherwise: cold ones miss every cache, warm ones hit and never miss (ember's "
        "`*_cache_hit`/`*_cache_miss` events, remote warm ones with hits from Redis, the others with none; "
        "Inductor's FX graph and AOTAutograd cache counters).",
        "", *HEADER, *(r.line() for r in rows), "",
        "C++ libraries the workload built in each process (median; ember: `build_cache_miss` events, Inductor: new "
        "`.so` files in its cache folder):", "", *(r.built() for r in rows)])
    print(text)
    print(f"{time.monotonic() - started:.0f} s in all")
    if args.write:
        write_section(Path(__file__).with_name("README.md"), "## Warm start", text)


if __name__ == "__main__":
    sys.exit(main())
