"""The report's source lines (`report/_sources.py`): a node's `file.py:12` shows that line when one file of the name
is known, and a file graphs were captured from wins over files of the same name that were only loaded."""

from __future__ import annotations

import linecache

import torch
from ember_core.graph import _fx_bridge, from_fx
from ember_core.report._sources import SourceLines
from torch.fx.experimental.proxy_tensor import make_fx


def _twins(tmp_path, monkeypatch):
    """Two files named models.py, both read by linecache (loaded, as a test suite or an app might)."""
    paths = []
    for folder, body in (("app", "def f(x):\n    return x.sin() * 2\n"), ("bench", "def f(x):\n    return 0\n")):
        path = tmp_path / folder / "models.py"
        path.parent.mkdir()
        path.write_text(body)
        linecache.getline(str(path), 1)
        paths.append(path)
    monkeypatch.setattr(_fx_bridge, "SOURCE_PATHS", {})  # this test's own registry
    return paths


def test_two_loaded_files_of_one_name_are_ambiguous(tmp_path, monkeypatch):
    _twins(tmp_path, monkeypatch)
    assert SourceLines().line("models.py:2") is None


def test_the_file_a_graph_was_captured_from_gives_the_line(tmp_path, monkeypatch):
    app, _ = _twins(tmp_path, monkeypatch)
    gm = make_fx(lambda x: x.sin() * 2)(torch.randn(3))
    for node in gm.graph.nodes:  # as Dynamo records the user's frame
        node.meta["stack_trace"] = f'  File "{app}", line 2, in f\n    return x.sin() * 2\n'
    graph = from_fx(gm)
    assert any(n.meta.get("source") == "models.py:2" for n in graph.nodes)
    assert _fx_bridge.SOURCE_PATHS == {"models.py": {str(app)}}
    assert SourceLines().line("models.py:2") == "return x.sin() * 2"
