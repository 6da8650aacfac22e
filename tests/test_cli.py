"""The `ember` command as a user runs it: `python -m ember`, `--version`, `ember show` on every file a real
`EMBER_DUMP` run writes, and the progress line of kernel builds on a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap

from ember._cli import main
from ember._show import file_format

TRAIN = textwrap.dedent("""
    import ember, torch
    def f(x, w):
        return (torch.relu(x @ w) * 2).softmax(-1).sum()
    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    for frontend in ("dynamo", "trace"):
        ember.compile(f, options={"frontend": frontend})(x, w).backward()
    print("trained")
""")


def run_python(args, tmp_path, **env):
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def test_python_m_ember_gives_the_commands_of_the_ember_script(tmp_path, capsys):
    for args in (["--version"], ["plugins", "--options"]):
        result = run_python(["-m", "ember", *args], tmp_path)
        assert result.returncode == 0, result.stderr
        try:
            assert main(args) == 0
        except SystemExit as done:  # --version exits, as argparse's own does
            assert done.code == 0
        assert result.stdout == capsys.readouterr().out
    result = run_python(["-m", "ember", "show", str(tmp_path / "gone.json")], tmp_path)
    assert result.returncode == 2 and result.stderr == f"ember show: error: {tmp_path / 'gone.json'}: no such file\n"


def test_show_reads_every_file_a_training_dump_writes(tmp_path, capsys):
    dump = tmp_path / "dump"
    result = run_python(["-c", TRAIN], tmp_path, EMBER_DUMP=str(dump))
    assert result.returncode == 0 and "trained" in result.stdout, result.stderr
    assert "ember: building" not in result.stderr  # C++ libraries were built, but stderr is not a terminal
    files = sorted(dump.iterdir())
    formats = {}
    for path in files:
        assert main(["show", str(path)]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert out.strip(), path
        formats.setdefault(file_format(path, path.read_bytes()[:4096]), []).append((path, out))
    assert {"graph-json", "graph-text", "plan", "source", "dot"} <= set(formats)
    assert all(out.startswith("# ember kernel plan") for _, out in formats["plan"])
    assert all(out == path.read_text() for path, out in formats["source"])
    assert any(p.name.endswith("guards_built-capture.src.txt") for p, _ in formats["source"])
    assert all(out.startswith("digraph ") and "[saved]" in out for _, out in formats["dot"])


# ---------------------------------------------------------------------------------------------- progress of builds

BUILD = textwrap.dedent("""
    import ember, torch
    x = torch.randn(64, 64)
    print(ember.compile(lambda x: (x.sin() * 3).relu().sum(1))(x).shape)
""")


def run_on_a_terminal(tmp_path, **env) -> tuple[int, str]:
    """Run BUILD with its stderr on a pseudo-terminal (stdout piped); returns (exit status, what the terminal got)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm", **env}
    proc = subprocess.Popen([sys.executable, "-c", BUILD], stdout=subprocess.PIPE, stderr=follower, env=env)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 300)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other end closed: the program has ended
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    proc.stdout.read()
    return proc.wait(timeout=60), seen.decode(errors="replace")


def test_a_terminal_sees_the_progress_of_kernel_builds(tmp_path):
    status, terminal = run_on_a_terminal(tmp_path)
    assert status == 0, terminal
    assert "ember: building 1 C++ library" in terminal


def test_progress_is_off_on_a_terminal_when_asked(tmp_path):
    status, terminal = run_on_a_terminal(tmp_path, EMBER_PROGRESS="0")
    assert status == 0, terminal
    assert "ember: building" not in terminal


def test_progress_forced_on_shows_without_a_terminal(tmp_path):
    result = run_python(["-c", BUILD], tmp_path, EMBER_PROGRESS="1")
    assert result.returncode == 0, result.stderr
    assert "ember: building 1 C++ library" in result.stderr
