"""The `ember` command (also `python -m ember`): `ember plugins` lists what is installed, `ember show FILE` prints any
file `EMBER_DUMP` writes (graphs, kernel plans, sources, diagrams), `ember cache info|clear` shows or empties the disk
caches, `ember report [DIR]` lists the compile reports `EMBER_REPORT=DIR` wrote (`--open`: the newest in a browser),
`ember --version` gives the versions of ember, its packages, torch and Python."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import sys
import time
import webbrowser
from pathlib import Path

from ember_core import (
    PASS_POINTS,
    EmberError,
    cache_root,
    cache_size_limit,
    clear_disk_cache,
    disk_cache_usage,
    get_plugin_manager,
)
from ember_core.caches import all_local_entries, load_artifact, save_artifact
from ember_core.report import age, list_reports
from ember_lowering import Capabilities, default_passes, select_passes

from ._show import show

# Characters a terminal may act on rather than show: C0 and C1 controls but newline and tab (escape sequences start
# with ESC or CSI), and the invisible format characters that reorder or hide text (bidirectional overrides,
# zero-width characters, line and paragraph separators).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                      "\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def printable(text: str) -> str:
    r"""Text from files (names, sources, titles, error messages quoting them) as the terminal should show it: each
    control character written as its escape (`\x1b`, `\u202e`), so none of them acts."""
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _say(*parts: object, file=None) -> None:
    """`print`, with every control character of the text escaped (see `printable`)."""
    print(printable(" ".join(map(str, parts))), file=file)


# the distributions `ember --version` reports, after ember itself
PACKAGES = ("ember-core", "ember-capture", "ember-autograd", "ember-partition", "ember-lowering", "ember-codegen-cpp",
            "ember-codegen-triton", "ember-runtime", "torch", "triton")


class _Version(argparse.Action):
    """`--version`: print the versions and exit, like argparse's own, but worked out only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the versions of ember, its packages, torch and "
                                                             "Python, and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        _version()
        parser.exit()


def _version() -> None:
    rows = [(name, _installed(name)) for name in ("ember", *PACKAGES)]
    rows.append(("python", platform.python_version()))
    _table(rows)


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _plugins(args: argparse.Namespace) -> int:
    manager = get_plugin_manager()
    rows = [("stage", "name", "priority", "devices", "plugin", "distribution")]
    for i in manager.registry.all():
        rows.append((i.stage, i.name, str(i.priority), ",".join(i.devices) or "any", i.plugin,
                     f"{i.dist} {i.version}".strip()))
    _table(rows)
    if manager.blocked:
        _say(f"\nblocked by EMBER_DISABLE_PLUGINS: {', '.join(manager.blocked)}")
    if args.passes:
        _say()
        _passes(manager.registry)
    if args.options:
        _say()
        _table([("option", "default", "plugin", "meaning")] + [
            (s.key, repr(s.default), s.plugin, s.doc)
            for s in sorted(manager.registry.options.values(), key=lambda s: s.key)
        ])
    return 0


def _passes(registry) -> None:
    """Both pipelines in the order they run: the graph passes by point, then each codegen's loop-IR passes (the
    default ones its capabilities select, and its own)."""
    _say("graph passes, in the order they run (default: run unless the `passes` option names others)")
    rows = [("point", "pass", "default", "plugin", "distribution")]
    for point in PASS_POINTS:
        rows += [(point, p.name, "yes" if p.default else "no", p.plugin, f"{p.dist} {p.version}".strip())
                 for p in registry.all("pass") if p.point == point]  # in the order they run: by priority
    _table(rows)
    _say("\nloop-IR passes of each codegen's plans, in order (ember-lowering's, picked by its capabilities)")
    rows = [("codegen", "passes")]
    for impl in registry.all("codegen"):
        capabilities = getattr(impl.impl, "capabilities", None)
        if isinstance(capabilities, Capabilities):
            rows.append((impl.name, ", ".join(p.id for p in select_passes(default_passes(), capabilities))))
    _table(rows)


def _table(rows: list[tuple[str, ...]]) -> None:
    rows = [tuple(printable(cell) for cell in r) for r in rows]  # widths as shown, escapes included
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        _say("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())


def _show(args: argparse.Namespace) -> int:
    _say(show(args.file, check=not args.no_verify))
    return 0


def _cache(args: argparse.Namespace) -> int:
    get_plugin_manager()  # installed codegens declare their caches' files, so that half-written entries count
    if args.action in ("save", "load"):
        if not args.path:
            raise EmberError(f"ember cache {args.action} needs the artifact's PATH")
        report = save_artifact(args.path, all_local_entries()) if args.action == "save" else load_artifact(args.path)
        done = "wrote" if args.action == "save" else "loaded"
        _say(f"{done} {len(report.entries)} entries {'to' if args.action == 'save' else 'from'} {report.path}"
             + (" (signed with the team key)" if args.action == "save" and report.signed else ""))
        for cache, key, reason in report.skipped:
            _say(f"  skipped {cache} {key[:12]}: {reason}")
        return 0 if report.entries or not report.skipped else 1
    if args.path:
        raise EmberError(f"ember cache {args.action} takes no PATH")
    if args.action == "clear":
        for u in clear_disk_cache():
            done = f"left alone: {u.problem}" if u.problem else f"removed {u.entries} entries ({u.bytes} bytes)"
            _say(f"{u.name}: {done} in {u.path}")
        return 0
    limit = cache_size_limit()
    _say(f"root: {cache_root()}")
    _say(f"limit: {'none' if limit is None else f'{limit / 2**20:g} MiB'} (EMBER_CACHE_SIZE_MB)")
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
        _say(f"ember report: no reports in {folder} (run with EMBER_REPORT={folder} to write one per process)",
             file=sys.stderr)
        return 1
    if args.open:
        newest = reports[0].path.resolve()
        if webbrowser.open(newest.as_uri()):
            _say(f"opened {newest}")
            return 0
        # no browser here (a server, a container): webbrowser says so by returning False, not by raising
        _say(f"ember report: no web browser could be opened here; the newest report is {newest}", file=sys.stderr)
        return 1
    now = time.time()
    rows = [("written", "size", "report", "title")]
    for r in reports:
        rows.append((age(now - r.modified), f"{r.size / 1024:.0f} KiB", str(r.path), r.title))
    _table(rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember", description=__doc__)
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list installed implementations of each stage, with versions")
    p.add_argument("--options", action="store_true", help="also list every option and its default")
    p.add_argument("--passes", action="store_true",
                   help="also print both pipelines in order: graph passes by point, each codegen's loop-IR passes")
    p.set_defaults(run=_plugins)
    s = sub.add_parser("show", help="print any file EMBER_DUMP writes, for people: a graph (.json or text), a kernel "
                                    "plan, a source, a diagram (.dot); the format is told by the file")
    s.add_argument("file")
    s.add_argument("--no-verify", action="store_true",
                   help="print a graph or plan without checking the rules of its schema or of the loop IR")
    s.set_defaults(run=_show)
    c = sub.add_parser("cache", help="show the disk caches (root, entries, bytes, size limit), clear them, or save "
                                     "every entry to a portable artifact PATH / load one into them")
    c.add_argument("action", choices=("info", "clear", "save", "load"))
    c.add_argument("path", nargs="?", metavar="PATH", help="the artifact file (save, load)")
    c.set_defaults(run=_cache)
    r = sub.add_parser("report", help="list the compile reports in DIR, newest first (default: $EMBER_REPORT, else .)")
    r.add_argument("folder", nargs="?", metavar="DIR")
    r.add_argument("--open", action="store_true", help="open the newest report in a web browser")
    r.set_defaults(run=_report)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except EmberError as e:
        _say(f"ember {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `ember show FILE | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ArithmeticError, LookupError, MemoryError, OSError, RecursionError, TypeError, ValueError) as e:
        # a file ember's readers should have refused with an EmberError: one line, not a traceback that may
        # print the file's text raw; the type names the bug for a report
        _say(f"ember {args.command}: internal error ({type(e).__name__}, please report it): {e}"[:500],
             file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
