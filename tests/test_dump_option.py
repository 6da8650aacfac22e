"""`options={"dump": folder}`: one compile's events dumped to its own folder (README's options table), from its
capture to the backward compiled on the first backward pass; EMBER_DUMP's folder and other compiles are unaffected.
The option was once accepted and ignored: no file was written anywhere."""

from __future__ import annotations

import re

import ember
import ember_core
import torch

OPTIONS = {"frontend": "trace", "codegen.cpu": "interpreter"}  # the option is under test: keep compiles cheap


def kinds(folder) -> list[str]:
    """The event kinds of the files in a dump folder, in event order."""
    names = sorted(p.name for p in folder.iterdir())
    return list(dict.fromkeys(re.match(r"[0-9]+-([a-z_]+)-", n)[1] for n in names))


def test_a_compile_dumps_its_events_to_its_folder(tmp_path):
    mine = tmp_path / "mine"
    f = ember.compile(lambda x: torch.sin(x) + 1, options={**OPTIONS, "dump": str(mine)})
    x = torch.randn(8)
    torch.testing.assert_close(f(x), torch.sin(x) + 1)
    found = kinds(mine)
    assert found[0] == "graph_captured" and "graph_compiled" in found


def test_the_backward_compiled_later_is_dumped_to_the_same_folder(tmp_path):
    mine = tmp_path / "mine"
    model = torch.nn.Linear(4, 3)
    f = ember.compile(model, options={**OPTIONS, "dump": str(mine)})
    out = f(torch.randn(2, 4))
    before = sorted(p.name for p in mine.iterdir())
    out.sum().backward()
    after = sorted(p.name for p in mine.iterdir())
    assert [n for n in after if n not in before and "graph_compiled" in n and "backward" in n]


def test_two_compiles_dump_apart_and_ember_dump_keeps_the_rest(tmp_path, monkeypatch):
    process = tmp_path / "process"
    monkeypatch.setenv("EMBER_DUMP", str(process))
    ember_core.reset_plugin_manager()
    try:
        a, b = tmp_path / "a", tmp_path / "b"
        ember.compile(lambda x: x * 2, options={**OPTIONS, "dump": str(a)})(torch.randn(3))
        ember.compile(lambda x: x - 2, options={**OPTIONS, "dump": str(b)})(torch.randn(3))
        ember.compile(lambda x: x / 2, options=OPTIONS)(torch.randn(3))
        texts = {p: "".join(f.read_text() for f in p.glob("*graph_captured*.txt")) for p in (a, b, process)}
        assert "aten.mul" in texts[a] and "aten.sub" in texts[b] and "aten.div" in texts[process]
        assert "aten.sub" not in texts[a] and "aten.mul" not in texts[b] and "aten.mul" not in texts[process]
    finally:
        monkeypatch.delenv("EMBER_DUMP")
        ember_core.reset_plugin_manager()
