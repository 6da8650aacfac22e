"""The `ember` command: `ember plugins` lists what is installed, `ember show FILE` prints a graph file (JSON, or the
text form that logs print and `EMBER_DUMP` writes), `ember cache info|clear` shows or empties the disk caches,
`ember report [DIR]` lists the compile reports `EMBER_REPORT=DIR` wrote (`--open`: the newest in a browser)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import webbrowser
from pathlib import Path

from ember_core import (
    EmberError,
    Graph,
    GraphError,
    cache_root,
    cache_size_limit,
    clear_disk_cache,
    disk_cache_usage,
    format_graph,
    get_plugin_manager,
    load,
    load_text,
    verify,
)
from ember_core.report import age, list_reports


def _plugins(args: argparse.Namespace) -> int:
    manager = get_plugin_manager()
    rows = [("stage", "name", "priority", "devices", "plugin", "distribution")]
    for i in manager.registry.all():
        rows.append((i.stage, i.name, str(i.priority), ",".join(i.devices) or "any", i.plugin,
                     f"{i.dist} {i.version}".strip()))
    _table(rows)
    if manager.blocked:
        print(f"\nblocked by EMBER_DISABLE_PLUGINS: {', '.join(manager.blocked)}")
    if args.options:
        print()
        _table([("option", "default", "plugin", "meaning")] + [
            (s.key, repr(s.default), s.plugin, s.doc)
            for s in sorted(manager.registry.options.values(), key=lambda s: s.key)
        ])
    return 0


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())


def _show(args: argparse.Namespace) -> int:
    path = Path(args.file)
    graph = load(path) if _is_json(path) else load_text(path)
    if not args.no_verify:
        _verify(graph, path)
    print(format_graph(graph))
    return 0


def _is_json(path: Path) -> bool:
    """A `.json` file, or a regular file whose text starts with `{` (the text form starts with `#`)."""
    if path.suffix == ".json":
        return True
    if not path.is_file():  # a fifo would block the read; the reader says what is wrong
        return False
    try:
        with path.open("rb") as f:
            return f.read(64).lstrip().startswith(b"{")
    except OSError:
        return False


def _verify(graph: Graph, path: Path) -> None:
    try:
        verify(graph)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None


def _cache(args: argparse.Namespace) -> int:
    get_plugin_manager()  # installed codegens declare their caches' files, so that half-written entries count
    if args.action == "clear":
        for u in clear_disk_cache():
            done = f"left alone: {u.problem}" if u.problem else f"removed {u.entries} entries ({u.bytes} bytes)"
            print(f"{u.name}: {done} in {u.path}")
        return 0
    limit = cache_size_limit()
    print(f"root: {cache_root()}")
    print(f"limit: {'none' if limit is None else f'{limit / 2**20:g} MiB'} (EMBER_CACHE_SIZE_MB)")
    rows = [("cache", "entries", "bytes", "path")]
    for u in disk_cache_usage():
        shown = f"{u.path} (not used: {u.problem})" if u.problem else str(u.path)
        rows.append((u.name, "-" if u.problem else str(u.entries), "-" if u.problem else str(u.bytes), shown))
    _table(rows)
    return 0


def _report(args: argparse.Namespace) -> int:
    folder = Path(args.folder or os.environ.get("EMBER_REPORT") or ".")
    reports = list_reports(folder)
    if not reports:
        print(f"ember report: no reports in {folder} (run with EMBER_REPORT={folder} to write one per process)",
              file=sys.stderr)
        return 1
    if args.open:
        newest = reports[0].path.resolve()
        webbrowser.open(newest.as_uri())
        print(f"opened {newest}")
        return 0
    now = time.time()
    rows = [("written", "size", "report", "title")]
    for r in reports:
        rows.append((age(now - r.modified), f"{r.size / 1024:.0f} KiB", str(r.path), r.title))
    _table(rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list installed implementations of each stage, with versions")
    p.add_argument("--options", action="store_true", help="also list every option and its default")
    p.set_defaults(run=_plugins)
    s = sub.add_parser("show", help="print a graph file (.json, else the text form EMBER_DUMP writes) as text")
    s.add_argument("file")
    s.add_argument("--no-verify", action="store_true", help="print without checking the schema's rules")
    s.set_defaults(run=_show)
    c = sub.add_parser("cache", help="show the disk caches (root, entries, bytes, size limit) or clear them")
    c.add_argument("action", choices=("info", "clear"))
    c.set_defaults(run=_cache)
    r = sub.add_parser("report", help="list the compile reports in DIR, newest first (default: $EMBER_REPORT, else .)")
    r.add_argument("folder", nargs="?", metavar="DIR")
    r.add_argument("--open", action="store_true", help="open the newest report in a web browser")
    r.set_defaults(run=_report)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except EmberError as e:
        print(f"ember {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
