from __future__ import annotations

import json

import torch
from ember._cli import main
from ember_core import from_fx, save
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


def test_show_of_a_future_version_says_so(tmp_path, capsys):
    path = graph_file(tmp_path)
    data = json.loads(path.read_text())
    data["version"] = [2, 0]
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    assert "schema version 2.0 is not supported" in capsys.readouterr().err
