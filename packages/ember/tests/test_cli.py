from __future__ import annotations

import json
import os

import pytest
import torch
from ember._cli import main
from ember_core import DiskCache, DumpWriter, Event, format_graph, from_fx, save
from torch.fx.experimental.proxy_tensor import make_fx


def graph_file(tmp_path):
    gm = make_fx(lambda x, y: (x * y).sum(1))(torch.randn(2, 3), torch.randn(2, 3))
    return save(from_fx(gm, name="mulsum"), tmp_path / "mulsum.json")


def test_plugins_lists_every_stage_with_distribution_versions(capsys):
    assert main(["plugins"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["stage", "name", "priority", "devices", "plugin", "distribution"]
    stages = {tuple(r[:2]): r for r in rows[1:]}
    assert stages["codegen", "interpreter"][-2:] == ["ember-core", "0.1.0"]
    assert ("frontend", "dynamo") in stages and ("frontend", "trace") in stages


def test_plugins_options_lists_option_docs(capsys):
    assert main(["plugins", "--options"]) == 0
    assert "recompile_limit" in capsys.readouterr().out


def test_plugins_passes_prints_both_pipelines_in_order(capsys):
    assert main(["plugins", "--passes"]) == 0
    out = capsys.readouterr().out
    graph_part = out[out.index("graph passes, in the order they run"):out.index("loop-IR passes of each codegen")]
    rows = [line.split()[:2] for line in graph_part.splitlines()[2:] if line.strip()]
    points = [point for point, _ in rows]
    assert points == sorted(points, key=["post_capture", "pre_autograd", "post_partition", "freeze",
                                         "pre_lowering"].index)
    assert ["freeze", "fold-constants"] in rows and ["pre_lowering", "fold-scatter-adds"] in rows
    loop = {line.split()[0]: line.split(None, 1)[1] for line in out[out.index("loop-IR passes"):].splitlines()[2:]}
    assert loop["cpp"].startswith("fuse-inline, fuse-vertical") and "stash-values" in loop["cpp"]
    assert "stash-values" not in loop["triton"] and "split-moments" not in loop["triton"]


def test_show_prints_the_graph_text(tmp_path, capsys):
    assert main(["show", str(graph_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "def mulsum(" in out and "aten.mul.Tensor" in out


def test_show_of_a_truncated_file_names_the_file(tmp_path, capsys):
    path = graph_file(tmp_path)
    path.write_text(path.read_text()[:100])
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not valid JSON" in err


def test_show_reads_a_json_file_by_its_content_whatever_its_name(tmp_path, capsys):
    path = graph_file(tmp_path).rename(tmp_path / "mulsum.graph")
    assert main(["show", str(path)]) == 0
    assert "def mulsum(" in capsys.readouterr().out


def test_show_of_a_future_version_says_so(tmp_path, capsys):
    path = graph_file(tmp_path)
    data = json.loads(path.read_text())
    data["version"] = [2, 0]
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    assert "schema version 2.0 is not supported" in capsys.readouterr().err


def text_dump(tmp_path, fn=lambda x, y: (x * y).sum(1), *args):
    """The files EMBER_DUMP writes for one captured graph: NNN-graph_captured-NAME.txt and .json."""
    gm = make_fx(fn)(*(args or (torch.randn(2, 3), torch.randn(2, 3))))
    graph = from_fx(gm, name="mulsum")
    DumpWriter(tmp_path).write_event(Event("graph_captured", "capture", graph=graph))
    return graph, tmp_path / "000-graph_captured-mulsum.txt"


def test_show_reads_the_text_files_dumps_write(tmp_path, capsys):
    graph, path = text_dump(tmp_path)
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out == format_graph(graph) + "\n"


def test_show_of_a_text_dump_takes_large_constants_from_the_json_beside_it(tmp_path, capsys):
    big = torch.arange(100.0)
    graph, path = text_dump(tmp_path, lambda x: x + big, torch.randn(100))
    assert "= constant [...]" in path.read_text()
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out == format_graph(graph) + "\n"


def test_show_of_a_bad_text_file_names_file_and_line_without_a_traceback(tmp_path, capsys):
    _, path = text_dump(tmp_path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace("aten.mul.Tensor", "aten.mul.Tensr")
    path.write_text("\n".join(lines) + "\n")
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ember show: error: {path}: line 3, op: unknown op 'aten.mul.Tensr'")
    assert "Traceback" not in err


def test_show_of_a_text_file_that_breaks_a_rule_names_the_file(tmp_path, capsys):
    _, path = text_dump(tmp_path)
    path.write_text(path.read_text().replace("(x_1, y_1)", "(x_1, ghost)"))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: graph 'mulsum'" in err and "undefined value 'ghost'" in err


def stored_cache(tmp_path, monkeypatch):
    """A cache root of the test's own holding two `cpp` entries and a file that is not ember's."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EMBER_CACHE_SIZE_MB", "64")
    cache = DiskCache("cpp", ("so", "cpp"))
    for key in ("k1", "k2"):
        cache.store(key, {"so": b"x" * 1000, "cpp": b"int main;"}, {})
    (cache.directory / "notes.txt").write_text("mine")
    return cache


def test_cache_info_shows_root_limit_and_each_cache(tmp_path, monkeypatch, capsys):
    stored_cache(tmp_path, monkeypatch)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"root: {tmp_path / 'cache'}" in out and "limit: 64 MiB (EMBER_CACHE_SIZE_MB)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["cache"][:3] == ["cache", "entries", "bytes"]
    assert rows["cpp"][1] == "2" and int(rows["cpp"][2]) > 2000 and rows["cpp"][3] == str(tmp_path / "cache" / "cpp")


def test_cache_clear_removes_entries_and_keeps_other_files(tmp_path, monkeypatch, capsys):
    cache = stored_cache(tmp_path, monkeypatch)
    assert main(["cache", "clear"]) == 0
    assert "cpp: removed 2 entries" in capsys.readouterr().out
    assert sorted(p.name for p in cache.directory.iterdir()) == ["CACHEDIR.TAG", "notes.txt"]
    assert not cache.lookup("k1").hit


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a directory away")
def test_cache_clear_leaves_a_directory_of_another_user_alone(tmp_path, monkeypatch, capsys):
    cache = stored_cache(tmp_path, monkeypatch)
    os.chown(cache.directory, 12345, -1)
    assert main(["cache", "clear"]) == 0
    assert "owned by uid 12345" in capsys.readouterr().out
    assert (cache.directory / "k1.so").exists()


# ---------------------------------------------------------------------------------------------- --version


def test_version_names_ember_each_package_and_torch(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == "ember"
    names = {line.split()[0] for line in lines}
    assert {"ember-core", "ember-capture", "ember-lowering", "ember-codegen-cpp", "ember-runtime", "torch"} <= names
    assert f"torch {torch.__version__}" in [" ".join(line.split()[:2]) for line in lines]


# ---------------------------------------------------------------------------------------------- show: every dump


def dumped(tmp_path, kind, name="mulsum", graph=None, source=None, suffix=None, content=None):
    """The path EMBER_DUMP gives an event's file: ember's own (`write_event`), or a plugin's (`suffix`, `content`)."""
    event = Event(kind, "test", graph=graph, source=source)
    writer = DumpWriter(tmp_path)
    if suffix is not None:
        return writer.write(event, suffix, content)
    paths = writer.write_event(event)
    return paths[-1]


def mulsum_graph():
    gm = make_fx(lambda x, y: (x * y).sum(1))(torch.randn(2, 3), torch.randn(2, 3))
    return from_fx(gm, name="mulsum")


def test_show_prints_a_kernel_plan_reprinted_after_parsing(tmp_path, capsys):
    from ember_lowering import format_plan, lower, parse_plan

    plan_text = str(lower(mulsum_graph(), emit_event=False))
    path = dumped(tmp_path, "kernels_planned", source=plan_text)
    assert path.name == "000-kernels_planned-test.src.txt"
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out == format_plan(parse_plan(plan_text)) + "\n"


def test_show_of_a_plan_with_a_bad_line_names_file_and_line(tmp_path, capsys):
    from ember_lowering import lower

    lines = str(lower(mulsum_graph(), emit_event=False)).splitlines()
    bad = next(i for i, line in enumerate(lines) if " = load " in line)
    lines[bad] = lines[bad].replace(" = load ", " = lode ")
    path = dumped(tmp_path, "kernels_planned", source="\n".join(lines))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ember show: error: {path}: ") and f"line {bad + 1}" in err and "Traceback" not in err


def test_show_reads_a_plan_by_its_header_whatever_its_name(tmp_path, capsys):
    from ember_lowering import lower

    path = tmp_path / "my.plan"
    path.write_text(str(lower(mulsum_graph(), emit_event=False)))
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out.startswith("# ember kernel plan 'mulsum'")


@pytest.mark.parametrize("kind, source", [
    ("kernels_generated", "// ember codegen-cpp: 1 kernel\nstatic int k1(float* b) {\n  return 0;\n}\n"),
    ("graph_compiled", "import triton\n\n@triton.jit\ndef k1(b, n):\n    pass\n"),
    ("guards_built", "def guard(flat, spec):\n    if spec != SPEC9:\n        return False\n    return True\n"),
    ("partitioned", "mincut (memory budget 1): saved 1 values, 24 bytes\n  saved x  float32[2, 3]  input, free"),
])
def test_show_prints_sources_as_they_are(tmp_path, capsys, kind, source):
    path = dumped(tmp_path, kind, source=source)
    assert path.name.endswith(".src.txt")
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out == path.read_text()


def joint_dot():
    from ember_core.testing import trace_joint
    from ember_partition import DefaultPartitioner
    from ember_partition._diagram import joint_diagram

    case = trace_joint(lambda x: (x.sin() * 2).sum(), [torch.randn(3, requires_grad=True)], name="sinsum")
    joint = case.joint
    return joint_diagram(joint, DefaultPartitioner().partition(joint, {}))


def test_show_lists_a_diagram_nodes_with_labels_and_inputs(tmp_path, capsys):
    path = dumped(tmp_path, "partitioned", suffix=".dot", content=joint_dot())
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("digraph 'sinsum': ") and out[0].endswith(" edges")
    sin = next(line for line in out if "aten.sin.default" in line)
    assert sin.split()[1:4] == ["sin", "|", "aten.sin.default"] and sin.endswith("  [forward]  <- i0")
    assert any(line.split()[0] == "legend" and "forward backward saved" in line for line in out)


@pytest.mark.parametrize("text, problem", [
    ('digraph "g" {\n  a -> b;\n', "line 2: expected '}' before the end of the file"),
    ('digraph "g" {\n  a [label="x];\n}\n', "line 2: a quoted string is not closed"),
    ('digraph "g" {\n  a -> ;\n}\n', "line 2: expected a node name after '->', got ';'"),
    ('graph { a -> b }', "line 1: '->' in an undirected graph (use '--')"),
])
def test_show_of_a_broken_diagram_names_file_line_and_problem(tmp_path, capsys, text, problem):
    path = tmp_path / "001-partitioned-g.dot"
    path.write_text(text)
    assert main(["show", str(path)]) == 2
    assert capsys.readouterr().err == f"ember show: error: {path}: {problem}\n"


def test_any_damage_to_a_diagram_is_a_value_error_naming_a_line():
    import random

    from ember._show import parse_dot

    text, rng = joint_dot(), random.Random(13)
    for _ in range(300):
        at = rng.randrange(len(text))
        inserted = text[:at] + rng.choice('"<>{}[];=-/*#') + text[at:]
        damaged = rng.choice([text[:at], text[:at] + text[at + 1:], inserted])
        try:
            parse_dot(damaged)
        except ValueError as e:
            assert str(e).startswith("line ")


def test_show_describes_an_svg_without_reading_it_as_xml(tmp_path, capsys):
    path = tmp_path / "003-partitioned-f.svg"
    path.write_text('<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><g/></svg>\n')
    (tmp_path / "003-partitioned-f.dot").write_text("digraph {}\n")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"SVG image, {path.stat().st_size} bytes") and "003-partitioned-f.dot" in out


@pytest.mark.parametrize("name, content, problem", [
    ("notes.md", b"# my notes\nnothing ember wrote\n", "not a file ember writes"),
    ("000-kernels_generated-f.src.txt", b"int x;\x00\xff\xfe", "not UTF-8 text"),
    ("picture.svg", b"GIF89a....", "not an SVG image"),
])
def test_show_of_a_file_of_no_known_format_says_what_it_reads(tmp_path, capsys, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ember show: error: {path}: {problem}") and "Traceback" not in err
    if problem == "not a file ember writes":
        assert "graph (.json, or text" in err and "kernel plan" in err and ".dot" in err


def test_show_of_a_missing_file_or_a_folder_says_so(tmp_path, capsys):
    assert main(["show", str(tmp_path / "gone.json")]) == 2
    assert "gone.json: no such file" in capsys.readouterr().err
    assert main(["show", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a folder" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- untrusted files


def test_show_of_a_constant_whose_strides_overflow_is_a_one_line_error(tmp_path, capsys):
    path = graph_file(tmp_path)
    data = json.loads(path.read_text())
    data["constants"] = {"c": {"dtype": "float32", "shape": [0, 2**63 - 1, 4], "data": []}}
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ember show: error: {path}: constants.c.shape: ") and "stride" in err
    assert len(err.splitlines()) == 1


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\r\u202e!"
ESCAPED = "\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\x0d\\u202e!"


def test_show_escapes_control_characters_of_a_source(tmp_path, capsys):
    path = dumped(tmp_path, "guards_built", source=f"def guard():  # {ESCAPES}\n    return True\n")
    assert main(["show", str(path)]) == 0
    assert capsys.readouterr().out == path.read_bytes().decode().replace(ESCAPES, ESCAPED)


def test_show_escapes_control_characters_of_a_diagram_and_of_errors(tmp_path, capsys):
    path = tmp_path / "001-partitioned-g.dot"
    path.write_text(f'digraph "g{ESCAPES}" {{\n  a [label="x{ESCAPES}"];\n}}\n')
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"x{ESCAPED}" in out and "\x1b" not in out and "\u202e" not in out
    path.write_text(f"digraph g {{\n  a -> {ESCAPES};\n}}\n")
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\\x1b" in err and "\x1b" not in err


def test_report_escapes_control_characters_of_titles_and_names(tmp_path, capsys):
    from ember_core.report._page import GENERATOR

    (tmp_path / f"ember-report-{ESCAPES}.html").write_text(
        f'<meta name="generator" content="{GENERATOR}"><title>t{ESCAPES}</title>')
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"t{ESCAPED}" in out and f"ember-report-{ESCAPED}.html" in out and "\x1b" not in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_report_skips_a_fifo_named_like_a_report_without_hanging(tmp_path):
    import subprocess
    import sys

    os.mkfifo(tmp_path / "ember-report-x.html")
    (tmp_path / "ember-report-y.html").symlink_to("/dev/zero")
    done = subprocess.run([sys.executable, "-m", "ember", "report", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "no reports in" in done.stderr
