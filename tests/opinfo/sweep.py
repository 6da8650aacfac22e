"""The sweep's driver: shards of op_db run in worker processes, so that a hang or a crash costs one case, not a run.

A worker (`python -m tests.opinfo worker JOB`) runs a chunk of ops in order and writes one JSON line per event on
its own pipe: `{"begin": [op, sample]}` before each sample, then one line per CaseResult. The driver reads them
with a per-case timeout. When a worker dies or goes silent past the timeout, the driver records the sample it had
begun as an `error` (`WorkerTimeout` / `WorkerCrashed`), kills it, and starts a fresh worker after that sample.
Workers also restart every chunk of ops, which bounds what one process accumulates (loaded libraries, caches).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from . import cases

CHUNK = 24  # ops per worker process
STARTUP = 120.0  # seconds a fresh worker may take to import torch, op_db and ember, beyond the case timeout
ROOT = Path(__file__).resolve().parents[2]


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` → (K, N), with 0 <= K < N."""
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 0 <= int(k) < int(n):
        raise ValueError(f"a shard is K/N with 0 <= K < N, not {text!r}")
    return int(k), int(n)


def shard_ops(dtype: str, shard: tuple[int, int], only: Sequence[str] = ()) -> list[str]:
    """The op keys of one shard: every N-th op supporting the dtype, from the K-th on (op_db sorted by name)."""
    keys = [cases.op_key(op) for op in cases.ops_for(dtype)]
    if only:
        missing = sorted(set(only) - {cases.op_key(op) for op in cases.op_db()})
        if missing:
            raise SystemExit(f"no OpInfo named {', '.join(missing)}")
        keys = [k for k in keys if k in set(only)]
    k, n = shard
    return keys[k::n]


@dataclasses.dataclass
class Job:
    """What one worker process runs: ops in order, skipping the samples of the first op up to `skip`."""

    ops: list[str]
    dtype: str
    phases: list[str]
    compiler: str
    samples: int
    skip: int = -1
    device: str = "cpu"
    grid: float = 0.0
    layout: str = ""
    dynamic: bool = False


# ---------------------------------------------------------------------------------------------------- worker side


def worker_main(job_text: str) -> int:
    """Run a Job given as JSON; protocol lines go to the real stdout, everything else printed goes to stderr."""
    job = Job(**json.loads(job_text))
    cases.DEVICE, cases.GRID, cases.LAYOUT, cases.DYNAMIC = job.device, job.grid, job.layout, job.dynamic
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for n, key in enumerate(job.ops):
        op = cases.find_op(key)
        skip = job.skip if n == 0 else -1

        def begin(index: int, key: str = key) -> None:
            out.write(json.dumps({"begin": [key, index]}) + "\n")

        for result in cases.run_op(op, job.dtype, job.phases, job.compiler, job.samples, skip, begin):
            out.write(json.dumps(dataclasses.asdict(result)) + "\n")
    out.write(json.dumps({"done": True}) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------------- driver side


def _lines(stream: IO[str], sink: queue.Queue) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def _dead_cases(job: Job, key: str, index: int, why: str, message: str) -> list[cases.CaseResult]:
    op = cases.find_op(key)
    phases = [p for p in job.phases if p == "forward" or cases.wants_backward(op, job.dtype)]
    klass = "worker-timeout" if why == "WorkerTimeout" else "worker-crashed"
    return [cases.CaseResult(op.name, op.variant_test_name, index, job.dtype, phase, "error", message, why, klass,
                             compiler=job.compiler) for phase in phases]


def run_job(job: Job, timeout: float, log: IO[str]) -> Iterator[cases.CaseResult]:
    """Yield the job's results, restarting its worker after a sample that hangs or crashes it."""
    while job.ops:
        cmd = [sys.executable, "-m", "tests.opinfo", "worker", json.dumps(dataclasses.asdict(job))]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
        current: tuple[str, int] | None = None
        why = ""
        while True:
            try:
                line = lines.get(timeout=timeout + (STARTUP if current is None else 0.0))
            except queue.Empty:
                why = "WorkerTimeout"
                break
            if line is None:
                why = "WorkerCrashed"
                break
            msg = json.loads(line)
            if "done" in msg:
                proc.wait()
                return
            if "begin" in msg:
                current = (msg["begin"][0], msg["begin"][1])
                continue
            yield cases.CaseResult(**msg)
        proc.kill()
        code = proc.wait()
        if current is None:  # died before its first sample (an import error): nothing to resume from
            raise RuntimeError(f"opinfo worker exited with {code} before running a case; see its log")
        key, index = current
        message = f"no result within {timeout:g} s" if why == "WorkerTimeout" else f"worker exited with {code}"
        yield from _dead_cases(job, key, index, why, message)
        job = dataclasses.replace(job, ops=job.ops[job.ops.index(key):], skip=index)


def run_shard(keys: Sequence[str], dtype: str, phases: Sequence[str], compiler: str, samples: int, jobs: int,
              timeout: float, results: Path, log_path: Path, device: str = "cpu", chunk: int = CHUNK,
              grid: float = 0.0, layout: str = "", dynamic: bool = False) -> list[cases.CaseResult]:
    """Run the ops in chunks on `jobs` workers at once; results are appended to `results` (JSON lines) as they come.
    `device`: where the workers make and run the samples (cases.DEVICE); `grid`: cases.GRID; `layout`: cases.LAYOUT;
    `dynamic`: cases.DYNAMIC."""
    chunks = [list(keys[i:i + chunk]) for i in range(0, len(keys), max(1, chunk))]
    pending: queue.Queue = queue.Queue()
    for chunk in chunks:
        pending.put(Job(chunk, dtype, list(phases), compiler, samples, device=device, grid=grid,
                        layout=layout, dynamic=dynamic))
    lock = threading.Lock()
    collected: list[cases.CaseResult] = []
    failures: list[BaseException] = []
    finished: list[Job] = []
    start = time.monotonic()
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("w") as out, log_path.open("w") as log:

        def work() -> None:
            while True:
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    for r in run_job(job, timeout, log):
                        with lock:
                            collected.append(r)
                            out.write(json.dumps(dataclasses.asdict(r)) + "\n")
                            out.flush()
                except BaseException as e:  # noqa: BLE001 - reported after the other workers finish
                    failures.append(e)
                with lock:
                    finished.append(job)
                    print(f"  {results.name}: {len(finished)}/{len(chunks)} chunks, {len(collected)} cases, "
                          f"{time.monotonic() - start:.0f} s", flush=True)

        threads = [threading.Thread(target=work) for _ in range(max(1, jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if failures:
        raise failures[0]
    return collected


def load_results(paths: Sequence[Path]) -> list[cases.CaseResult]:
    """The results in the files, each failure classed again by today's rules (a dead worker's class stays)."""
    fields = {f.name for f in dataclasses.fields(cases.CaseResult)}
    out = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                r = cases.CaseResult(**{k: v for k, v in json.loads(line).items() if k in fields})
                if r.failed and not r.klass.startswith("worker-"):
                    r.klass = cases.classify(r)
                out.append(r)
    return out


def result_name(compiler: str, dtype: str, shard: tuple[int, int]) -> str:
    return f"{compiler}-{dtype}-shard-{shard[0]}-of-{shard[1]}.jsonl"

