"""EMBER_LOGS and EMBER_DUMP, seen as a user sees them: in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import ember, torch
    def f(x):
        return torch.relu(x) * 2
    g = ember.compile(f, options={"frontend": "trace"})
    for n in (10, 8, 10):
        g(torch.randn(n))
    ember.compile(f, options={"frontend": "trace"})(torch.randn(10))
""")


def run(env):
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_ember_logs_prints_graphs_guards_recompiles_and_cache():
    result = run({"EMBER_LOGS": "graphs,guards,recompiles,cache"})
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "[ember.graphs]" in err and "aten.relu.default" in err
    assert "[ember.guards]" in err
    assert "[ember.recompiles]" in err and "size of dim 0 changed from 10 to 8" in err
    assert "[ember.cache]" in err and "reusing" in err


def test_ember_logs_off_prints_nothing():
    result = run({"EMBER_LOGS": ""})
    assert result.returncode == 0, result.stderr
    assert "[ember" not in result.stderr


def test_ember_dump_writes_numbered_graph_files(tmp_path):
    result = run({"EMBER_DUMP": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith("graph_captured-f.txt") or "graph_captured" in n for n in names), names
    assert any(n.endswith(".json") for n in names)


TRAINING = textwrap.dedent("""
    import ember, torch
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    ember.compile(model, options={"frontend": "trace"})(torch.randn(2, 4)).sum().backward()
""")


def test_ember_dump_numbers_a_partition_diagram_with_its_event(tmp_path):
    result = subprocess.run([sys.executable, "-c", TRAINING], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "EMBER_DUMP": str(tmp_path), "EMBER_CACHE_DIR": str(tmp_path / "c")})
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    (diagram,) = [n for n in names if n.endswith(".dot")]
    stem = diagram.removesuffix(".dot")
    assert stem.split("-")[1] == "partitioned"
    assert {n.removeprefix(stem) for n in names if n.startswith(stem.split("-")[0] + "-")} >= {".dot", ".txt", ".json"}


def test_ember_dump_writes_the_generated_triton_source(tmp_path):
    script = textwrap.dedent("""
        import ember, torch
        ember.compile(lambda x: torch.softmax(x, -1) * 2, options={"codegen.cpu": "triton"})(torch.randn(4, 8))
    """)
    env = {**os.environ, "EMBER_DUMP": str(tmp_path), "EMBER_CACHE_DIR": str(tmp_path / "c"), "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    sources = [p.read_text() for p in tmp_path.glob("*kernels_generated*.src.txt")]
    assert any("@triton.jit" in s and "# ---- wrapper (Python) ----" in s for s in sources), sorted(tmp_path.iterdir())


RECOMPILES = textwrap.dedent("""
    import ember, sys, torch
    def f(x, n):
        return x * n
    g = ember.compile(f, dynamic=False, options={"frontend": sys.argv[1]})
    g(torch.randn(4), 2)
    g(torch.randn(4), 3)  # a recompile: n changed
    g(torch.randn(4, 2), 3)  # another: x's rank changed (and, under Dynamo, n == 2 fails again)
""")


def test_each_recompile_is_one_line_of_the_recompiles_log():
    """A recompile printed its reason twice (the guard failure, then the recompile with the same text); under Dynamo
    the line named only the last failing entry's reason."""
    for frontend in ("trace", "dynamo"):
        result = subprocess.run([sys.executable, "-c", RECOMPILES, frontend], capture_output=True, text=True,
                                timeout=300, env={**os.environ, "EMBER_LOGS": "recompiles"})
        assert result.returncode == 0, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("[ember.recompiles]")]
        assert len(lines) == 2, (frontend, result.stderr)
        assert "rank" in lines[1] or "dim" in lines[1] or "dimension" in lines[1], (frontend, lines)


def test_a_warm_start_dumps_the_plans_and_partitions_it_reused(tmp_path):
    """EMBER_DUMP on a warm start wrote no plan and no partition, and no note why: each came from a disk cache.
    Now each cache hit's entry is dumped, named as a hit (`NNN-disk_cache_hit-<graph>.src.txt`), and the reused
    partition is drawn as the cold start drew it (`NNN-disk_cache_hit-<forward>.dot`, titled as reused)."""
    script = textwrap.dedent("""
        import ember, torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
        x = torch.randn(4, 8)
        ember.compile(model, options={"frontend": "trace"})(x).sum().backward()
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache")}
    for folder in ("cold", "warm"):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                                env={**env, "EMBER_DUMP": str(tmp_path / folder)})
        assert result.returncode == 0, result.stderr
    warm = {p.name: p.read_text() for p in (tmp_path / "warm").glob("*disk_cache_hit*.src.txt")}
    assert any("kernel " in text for text in warm.values()), sorted(warm)  # lowering's plans, as their text
    assert any('"saved"' in text or "saved" in text for text in warm.values()), sorted(warm)  # the partition
    assert not list((tmp_path / "cold").glob("*disk_cache_hit*"))
    cold_diagrams = list((tmp_path / "cold").glob("*-partitioned-*.dot"))
    warm_diagrams = list((tmp_path / "warm").glob("*-disk_cache_hit-*.dot"))
    assert len(cold_diagrams) == len(warm_diagrams) == 1
    assert "partition from the disk cache" in warm_diagrams[0].read_text()
