"""EMBER_REPORT: one page per process, rewritten after each compile (atomically) and at exit; `list_reports`."""

import logging
import os
import time

from ember_core import Event, PluginManager, _builtin
from ember_core.report import ReportWriter, list_reports
from report_events import inference_events, training_events


def feed(writer: ReportWriter, events) -> None:
    for e in events:
        writer.ember_event(e)


def test_the_page_is_written_when_a_graph_is_compiled(tmp_path):
    writer = ReportWriter(tmp_path)
    events = inference_events()
    feed(writer, events[:2])  # captured, guards: nothing finished yet
    assert not writer.path.exists()
    feed(writer, events[2:])
    html = writer.path.read_text()
    assert writer.path.parent == tmp_path and writer.path.name.endswith(f"-{os.getpid()}.html")
    assert "Captured graph" in html and "x.shape[0] == 4" in html
    assert [p.name for p in tmp_path.iterdir()] == [writer.path.name]  # no temporary file left


def test_events_after_the_last_compile_are_written_at_exit(tmp_path):
    writer = ReportWriter(tmp_path)
    feed(writer, inference_events())
    writer.ember_event(Event("graph_cache_hit", "runtime", "reusing a build of 'late'", data={"graph": "late"}))
    assert "reusing a build of" not in writer.path.read_text()
    writer._at_exit()
    assert "reusing a build of" in writer.path.read_text()


def test_a_writer_without_a_folder_ignores_events(tmp_path):
    writer = ReportWriter(None)
    feed(writer, training_events())
    assert not writer.enabled and writer.path is None and writer.write() is None


def test_an_unwritable_folder_is_warned_once_and_never_fails(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    writer = ReportWriter(blocker / "reports")
    with caplog.at_level(logging.WARNING, logger="ember"):
        feed(writer, training_events())
    warnings = [r for r in caplog.records if "EMBER_REPORT: cannot write" in r.getMessage()]
    assert len(warnings) == 1


def test_reports_are_listed_newest_first_and_other_files_are_skipped(tmp_path):
    old, new = ReportWriter(tmp_path), ReportWriter(tmp_path)
    new.path = tmp_path / "ember-report-20990101-000000-2.html"  # two writers of one process: two names
    feed(old, inference_events())
    feed(new, training_events())
    past = time.time() - 3600
    os.utime(old.path, (past, past))
    (tmp_path / "ember-report-fake.html").write_text("<html><title>not ours</title></html>")
    (tmp_path / "notes.txt").write_text("x")
    found = list_reports(tmp_path)
    assert [r.path for r in found] == [new.path, old.path]
    assert found[0].title.startswith("ember report: ") and found[0].size > 1000
    assert list_reports(tmp_path / "missing") == []


def test_ember_report_in_the_environment_turns_on_core_s_observer(tmp_path):
    try:
        manager = PluginManager(load_entrypoints=False, env={"EMBER_REPORT": str(tmp_path)})
        manager.register(_builtin, name="core")
        assert manager.config["report"] == str(tmp_path)
        for e in inference_events():
            manager.emit(e)
        (page,) = list_reports(tmp_path)
        assert "Captured graph" in page.path.read_text()
    finally:
        off = PluginManager(load_entrypoints=False, env={})
        off.register(_builtin, name="core")
    assert not _builtin._report.enabled
