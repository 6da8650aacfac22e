"""The compile report of real compiles: a transformer block's training step has every stage's section, each
stage's event carries its time, names and source lines from the user cannot inject markup, `EMBER_REPORT` writes
a page per process that `ember report` lists, and the page loads in a headless Chromium with no console message
and draws its graphs (skipped, saying so, where no Chromium is installed)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib
from collections import Counter
from pathlib import Path

import ember
import ember_core
import ember_runtime
import pytest
import torch
from ember._cli import main
from ember_core.graph import _fx_bridge
from ember_core.report import ReportWriter, list_reports
from models import Block

STAGE_EVENTS = ("graph_captured", "joint_traced", "partitioned", "kernels_planned", "kernels_generated",
                "graph_compiled")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
EVIL_FILE = "<img src=x onerror=alert(1)>.py"


@pytest.fixture
def report(tmp_path):
    """A report writer of the test's own, registered as an `ember_event` observer for the test."""
    writer = ReportWriter(tmp_path / "reports")
    manager = ember_core.get_plugin_manager()
    name = manager.register(writer, name=f"report-{id(writer)}")
    yield writer
    manager.pm.unregister(name=name)


def training_step() -> list:
    torch.manual_seed(0)
    with ember.record_events() as rec:
        ember.compile(Block())(torch.randn(2, 8, 32)).sum().backward()
    return rec.events


def test_a_training_step_has_every_stage_in_its_report(report, monkeypatch):
    monkeypatch.setattr(_fx_bridge, "SOURCE_PATHS", {})  # benchmarks/models.py, compiled by another test, forgotten
    events = training_step()
    html = report.write().read_text()
    for title in ("Captured graph", "Joint graph", "Partition by <code>mincut</code>", "Partition report",
                  "forward graph <code>dynamo_0_0_joint_forward</code>", "backward graph", "Kernel plan (loop IR)",
                  "Generated C++ source", "Python wrapper", "Compile time per stage", "Source lines"):
        assert title in html, title
    assert html.count('class="diagram"') >= 4  # captured, partition, and the forward and backward by kernel
    assert "saved 18 values" in html or "saved " in html  # the partitioner's report
    kernel_rows = re.findall(r'<tr id="c1-g1-r\d+">', html)
    assert len(kernel_rows) == len(next(e for e in events if e.kind == "kernels_planned").data["steps"])
    assert re.search(r'<span id="src-\d+"><code>models.py:\d+</code></span></td><td><code>[^<]*self\.', html)
    for kind in STAGE_EVENTS:
        times = [e.data.get("seconds") for e in events if e.kind == kind]
        assert times and all(isinstance(s, float) and s >= 0 for s in times), kind


def test_backward_kernels_link_to_the_source_lines_they_differentiate(report):
    """The joint trace dropped node meta, so a backward-only kernel (a gradient no forward node computes) showed no
    source line. Each backward node now carries the line of the captured node whose derivative it computes."""
    torch._dynamo.reset()
    ember_runtime.clear_cache()  # lowered in this test (or its plan taken from the disk), not reused in memory
    training_step()
    html = report.write().read_text()
    backward = re.findall(r'<tr id="c1-g2-r\d+">(.*?)</tr>', html, re.S)
    kernels = [row for row in backward if "<td>kernel</td>" in row]
    assert kernels and all(re.search(r"models\.py:\d+", row) for row in kernels), kernels[:3]
    lines = {m for row in kernels for m in re.findall(r"models\.py:(\d+)", row)}
    assert len(lines) >= 3, lines  # layer norms, attention, MLP: not one line for everything


def test_the_runtime_times_the_stages_it_runs():
    events = training_step()
    joint, part = (next(e for e in events if e.kind == k) for k in ("joint_traced", "partitioned"))
    compiled = [e for e in events if e.kind == "graph_compiled"]
    planned = {e.data["graph"]: e.data["seconds"] for e in events if e.kind == "kernels_planned"}
    assert joint.data["seconds"] > 0 and part.data["seconds"] > 0
    for e in compiled:  # the codegen's call covers lowering it
        assert e.data["seconds"] >= planned[e.graph.name]


def evil_module(folder: Path):
    """A module whose file name is markup: its nodes' `source` is `<img src=x onerror=alert(1)>.py:4`."""
    path = folder / EVIL_FILE
    path.write_text(textwrap.dedent("""\
        import torch

        def f(x):
            return torch.relu(x) * 2 + x.sin()
        """))
    spec = importlib.util.spec_from_file_location("evil_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_markup_in_a_source_file_name_is_shown_escaped(report, tmp_path):
    fn = evil_module(tmp_path).f
    ember.compile(fn)(torch.randn(4, 8))
    html = report.write().read_text()
    assert "<img" not in html and html.count("<script") == 1
    assert "&lt;img src=x onerror=alert(1)&gt;.py:4" in html


def test_ember_report_writes_a_page_per_process_that_the_command_lists(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "reports"
    script = "import torch, ember\nember.compile(lambda x: (x.cos() + 1).sum(1))(torch.randn(4, 8))\n"
    env = {**os.environ, "EMBER_REPORT": str(folder)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    pages = list_reports(folder)
    assert len(pages) == 2 and pages[0].modified >= pages[1].modified
    assert "Captured graph" in pages[0].path.read_text()
    assert main(["report", str(folder)]) == 0
    listed = capsys.readouterr().out
    assert listed.index(pages[0].path.name) < listed.index(pages[1].path.name) and "ember report: -c" in listed
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda uri: opened.append(uri) or True)  # a browser opened it
    monkeypatch.setenv("EMBER_REPORT", str(folder))
    assert main(["report", "--open"]) == 0
    assert opened == [pages[0].path.resolve().as_uri()]
    capsys.readouterr()
    monkeypatch.setattr("webbrowser.open", lambda uri: False)  # no browser on this machine: nothing opened
    assert main(["report", "--open"]) == 1
    err = capsys.readouterr().err
    assert "no web browser could be opened" in err and str(pages[0].path.resolve()) in err
    assert main(["report", str(tmp_path / "empty")]) == 1
    assert "no reports in" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- in a browser


def browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


needs_browser = pytest.mark.skipif(browser() is None, reason="no Chromium or Chrome binary on PATH (install "
                                   "Debian's `chromium` to run the report's browser tests)")


def run_browser(*args: str) -> subprocess.CompletedProcess:
    command = [browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
               "--no-first-run", "--disable-extensions", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to the console (its errors, blocked scripts or images): Chromium logs each as
    `...:CONSOLE(line)] "message", source: ...`."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB or RGBA PNG (what Chromium's screenshots are)."""
    pos, chunks, head = 8, [], None
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        head = struct.unpack(">IIBBBBB", body) if kind == b"IHDR" else head
        chunks += [body] if kind == b"IDAT" else []
        pos += 12 + size
    width, height, depth, colour = head[:4]
    assert depth == 8 and colour in (2, 6), f"unexpected PNG format: depth {depth}, colour type {colour}"
    bpp = 3 if colour == 2 else 4
    raw, stride, prev, rows = zlib.decompress(b"".join(chunks)), width * bpp, bytearray(width * bpp), []
    for r in range(height):
        start = r * (stride + 1)
        line = unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), prev, bpp)
        rows.append(b"".join(bytes(line[i:i + 3]) for i in range(0, stride, bpp)))
        prev = line
    return width, height, rows


def unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> bytearray:
    """Undo one PNG row filter (None, Sub, Up, Average, Paeth) in place."""
    if kind == 1:
        for i in range(bpp, len(line)):
            line[i] = (line[i] + line[i - bpp]) & 255
    elif kind == 2:
        line = bytearray((x + y) & 255 for x, y in zip(line, prev))
    elif kind == 3:
        for i in range(len(line)):
            line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
    elif kind == 4:
        for i in range(len(line)):
            a, b, c = (line[i - bpp], prev[i], prev[i - bpp]) if i >= bpp else (0, prev[i], 0)
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return line


@needs_browser
def test_the_report_loads_in_a_browser_without_console_messages_and_shows_the_graph(report, tmp_path):
    training_step()
    page = report.write()
    done = run_browser("--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert not console_messages(done.stderr)
    assert 'data-script="ran"' in done.stdout  # the page's script ran under its own Content-Security-Policy
    shot = tmp_path / "report.png"
    done = run_browser(f"--screenshot={shot}", "--window-size=1400,1000", "--hide-scrollbars", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    width, height, rows = read_png(shot.read_bytes())
    assert (width, height) == (1400, 1000)
    pixels = Counter(row[i:i + 3] for row in rows[::2] for i in range(0, len(row), 6))
    assert len(pixels) > 200  # text, boxes and bars: not a blank page
    parameter, reduction = bytes.fromhex("edf2ff"), bytes.fromhex("d3f9d8")  # the captured graph's box colours
    assert pixels[parameter] > 200 and pixels[reduction] > 50


@needs_browser
def test_markup_from_user_code_does_not_run_in_the_browser(report, tmp_path):
    ember.compile(evil_module(tmp_path).f)(torch.randn(4, 8))
    done = run_browser("--dump-dom", report.write().as_uri())
    assert done.returncode == 0 and 'data-script="ran"' in done.stdout
    assert not console_messages(done.stderr)  # an injected image or script would be blocked, and say so
    assert "<img" not in done.stdout
