"""The shape every package keeps (docs/architecture.md, "Where a change goes"): no module over 450 lines, and no
import circle, neither at module level nor hidden by a function-local import that would close one if it were at
the top. A lazy import for speed or an optional dependency is fine; one that only breaks a circle is not."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for p in (ROOT / "packages").glob("*/src/*") if p.is_dir() and (p / "__init__.py").exists())
MAX_LINES = 450


def modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(src: Path) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """(module → the package's modules it imports at module level, [(module, target, line) of function-local
    imports]); imports under `if TYPE_CHECKING:` are annotations and left out."""
    mods = modules(src)
    top: dict[str, set[str]] = {m: set() for m in mods}
    local: list[tuple[str, str, int]] = []
    for name, path in mods.items():
        for target, line, in_function in _imports_of(name, path, mods):
            if target != name:
                (local.append((name, target, line)) if in_function else top[name].add(target))
    return top, local


def _imports_of(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported module of the package, line, whether inside a function) for each import in `path`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names if a.name in mods]
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
        return subs + [target] if target in mods and len(subs) < len(node.names) else subs

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend((t, node.lineno, in_function) for t in targets(node))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return False


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_no_module_is_over_450_lines(src):
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in src.rglob("*.py")}
    assert {p: n for p, n in lengths.items() if n > MAX_LINES} == {}


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_no_import_circle_in_a_package(src):
    top, local = imports(src)
    package = src.name
    # a module that imports the package itself (its public names) is not a circle of modules
    graph = {m: {t for t in ts if t != package} for m, ts in top.items()}
    circles = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if reaches(graph, b, a)})
    hidden = [f"{m}:{line} imports {t}" for m, t, line in local if t != package and reaches(graph, t, m)]
    assert (circles, hidden) == ([], [])


def test_the_checks_see_a_circle_and_a_hidden_one(tmp_path):
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "__init__.py").write_text("")
    (src / "a.py").write_text("from . import b\n")
    (src / "b.py").write_text("def f():\n    from . import a\n")
    (src / "c.py").write_text("from .d import x\n")
    (src / "d.py").write_text("from .c import y\n")
    top, local = imports(src)
    assert top["pkg.c"] == {"pkg.d"} and top["pkg.d"] == {"pkg.c"}
    assert local == [("pkg.b", "pkg.a", 2)] and reaches(top, "pkg.a", "pkg.b")


def direct_parses(path: Path) -> list[int]:
    """Lines of `path` that call `ast.parse` themselves."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"]


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_source_is_parsed_only_through_parse_python(src):
    """Two `ast.parse` in two threads at once can fail on Python 3.11 (gh-106905): shipped code parses through
    `ember_core.parse_python`, which holds the process's one AST lock."""
    allowed = ROOT / "packages" / "core" / "src" / "ember_core" / "_python_ast.py"
    found = {str(p.relative_to(ROOT)): lines for p in src.rglob("*.py") if p != allowed and (lines := direct_parses(p))}
    assert found == {}


def test_the_parse_check_sees_a_direct_parse(tmp_path):
    (tmp_path / "m.py").write_text("import ast\n\nx = ast.parse('1')\ny = ember_core.parse_python('1')\n")
    assert direct_parses(tmp_path / "m.py") == [3]
