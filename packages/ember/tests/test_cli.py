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
